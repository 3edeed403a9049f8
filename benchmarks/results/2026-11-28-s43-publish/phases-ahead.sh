cd /work/main
for round in 1 2 3; do
for t in old new; do
  case $t in old) R=/tmp/s43/old2;; new) R=/work/main;; esac
  BENCH=$R/benchmarks PYTHONPATH=$R/src timeout 900 .venv/bin/python benchmarks/results/2026-11-28-s43-publish/phases.py 2 $t $SEGMENTS 2>>/tmp/s43/ab/ph.err
done
done
