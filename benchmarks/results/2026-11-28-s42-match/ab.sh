cd /work/main
for round in 1 2 3; do
for t in old new; do
  case $t in old) R=/tmp/s42/old;; new) R=/work/main;; esac
  BENCH=$R/benchmarks PYTHONPATH=$R/src timeout 900 .venv/bin/python /tmp/s42/ab.py 2 $t $SEGMENTS 2>>/tmp/s42/ab.err
done
done
