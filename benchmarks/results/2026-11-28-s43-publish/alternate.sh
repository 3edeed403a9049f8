# The tree before (a worktree at $OLD) and this one, alternated, three rounds of
# session 41's ab.py (two runs each): usage  OLD=<worktree> SEGMENTS=16 bash alternate.sh [phases]
# This session's runs: OLD=/tmp/s43/old (a1a3958) -> ab16.jsonl, and with phases ->
# ph16.jsonl; OLD=/tmp/s43/old2 (aa93c81) against 2fed484 -> ab16-ahead.jsonl and
# ph16-ahead.jsonl (there with a copy of the phases mode as phases.py).
# (Session 44's alternate.sh runs any set of trees; this is its case of two.)
TREES="old=$OLD new=/work/main" bash /work/main/benchmarks/results/2026-11-28-s44-parse-pipeline/alternate.sh "$@"
