# The freshness runs alternated over two trees, ROUNDS rounds (2 unless given):
#   TREES="old=/tmp/s45/old new=/work/main" bash fresh_ab.sh 2000 200
cd /work/main
for round in $(seq "${ROUNDS:-2}"); do
  for pair in $TREES; do
    tag=${pair%%=*}; tree=${pair#*=}
    BENCH=$tree/benchmarks PYTHONPATH=$tree/src timeout 900 .venv/bin/python benchmarks/results/2026-11-28-s45-read-ahead/fresh_ab.py "$tag" "$@" 2>/dev/null | grep '^{'
  done
done
