# the freshness section alternated over the tree before (a worktree at /tmp/s42/old) and this one
cd /work/main
for round in 1 2; do
for t in old new; do
  case $t in old) R=/tmp/s42/old;; new) R=/work/main;; esac
  PYTHONPATH=$R/src timeout 900 .venv/bin/python $R/benchmarks/run.py --only freshness > /tmp/s42/fab-$t-$round.log 2>&1
  cp $R/benchmarks/results/2026-11-28.json /tmp/s42/fab-$t-$round.json
done
done
