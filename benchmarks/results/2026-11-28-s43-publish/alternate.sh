# The tree before (a worktree at $OLD) and this one, alternated, three rounds of
# session 41's ab.py (two runs each): usage  OLD=<worktree> SEGMENTS=16 bash alternate.sh [phases]
# This session's runs: OLD=/tmp/s43/old (a1a3958) -> ab16.jsonl, and with phases ->
# ph16.jsonl; OLD=/tmp/s43/old2 (aa93c81) against 2fed484 -> ab16-ahead.jsonl and
# ph16-ahead.jsonl (there with a copy of the phases mode as phases.py).
cd /work/main
for round in 1 2 3; do
for t in old new; do
  case $t in old) R=$OLD;; new) R=/work/main;; esac
  BENCH=$R/benchmarks PYTHONPATH=$R/src timeout 900 .venv/bin/python benchmarks/results/2026-11-27-s41-start/ab.py 2 $t $SEGMENTS "$@"
done
done
