# Trees alternated, ROUNDS rounds (3 unless given) of session 41's ab.py, two runs each:
#   TREES="base=/tmp/s44/base new=/work/main" SEGMENTS=1000 bash alternate.sh [phases]
# Each tree is a worktree (compiled: python -m compileall -q <tree>/src/deltamv).
cd /work/main
for round in $(seq "${ROUNDS:-3}"); do
  for pair in $TREES; do
    tag=${pair%%=*}; tree=${pair#*=}
    BENCH=$tree/benchmarks PYTHONPATH=$tree/src timeout 900 .venv/bin/python \
      benchmarks/results/2026-11-27-s41-start/ab.py 2 "$tag" "$SEGMENTS" "$@"
  done
done
