cd /work/main
for round in 1 2; do
for t in old mid new; do
  case $t in old) R=/tmp/s41/old;; mid) R=/tmp/s41/mid;; new) R=/work/main;; esac
  BENCH=$R/benchmarks PYTHONPATH=$R/src timeout 900 .venv/bin/python /tmp/s41/ab.py 3 $t 2>>/tmp/s41/ab.err
done
done
