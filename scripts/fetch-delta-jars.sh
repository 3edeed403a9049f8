#!/usr/bin/env bash
# Fetch the delta-spark jars once, with the machine's Maven client, into a folder the
# set-up owns (default .venv/delta-jars). deltamv's sessions put that folder's jars on
# spark.jars, so no session ever resolves anything at start (docs/delta-spark.md).
#
#   scripts/fetch-delta-jars.sh [DEST] [PYTHON]      (MVN=/path/to/mvn to choose Maven)
#
# The artifact follows the installed packages, as delta-spark's own
# configure_spark_with_delta_pip does: io.delta:delta-spark_<spark major.minor>_2.13:
# <delta-spark version>. Its runtime dependencies come along, except those the pyspark
# distribution already ships (same artifactId, any version: Spark's own copy is first
# on the class path anyway). Idempotent: a stamp names the artifact fetched; a re-run
# with the same artifact does nothing. Without mvn, or when Maven Central cannot be
# reached, it prints one line and exits 0: deltamv then reads views with delta-rs.
set -euo pipefail

DEST=${1:-.venv/delta-jars}
PY=${2:-.venv/bin/python}
STAMP="$DEST/.fetched"
PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.6.1
MVN=${MVN:-mvn}

read -r DELTA_VERSION SPARK_MM SPARK_JARS < <("$PY" - <<'EOF'
import importlib.metadata as md
import os
import pyspark
try:
    delta = md.version("delta-spark")
except md.PackageNotFoundError:
    delta = "-"
mm = ".".join(pyspark.__version__.split(".")[:2])
print(delta, mm, os.path.join(os.path.dirname(pyspark.__file__), "jars"))
EOF
)
if [ "$DELTA_VERSION" = "-" ]; then
  echo "delta-spark jars: the delta-spark Python package is not installed; views are read with delta-rs" >&2
  exit 0
fi
ARTIFACT="io.delta:delta-spark_${SPARK_MM}_2.13:${DELTA_VERSION}"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$ARTIFACT" ]; then
  touch "$STAMP"  # newer than the venv's stamp: make need not ask again
  exit 0
fi
if ! command -v "$MVN" >/dev/null 2>&1; then
  echo "delta-spark jars: no Maven client (mvn) on PATH; deltamv reads views with delta-rs (docs/delta-spark.md)" >&2
  exit 0
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
IFS=: read -r GROUP ARTIFACT_ID VERSION <<<"$ARTIFACT"
cat >"$WORK/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>deltamv</groupId>
  <artifactId>delta-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>$GROUP</groupId>
      <artifactId>$ARTIFACT_ID</artifactId>
      <version>$VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
# dependency:list resolves (downloads) every runtime jar into the local repository and
# names each one's file; we copy the ones Spark lacks.
if ! "$MVN" -q -B -f "$WORK/pom.xml" "$PLUGIN:list" -DincludeScope=runtime \
  -DoutputAbsoluteArtifactFilename=true -DoutputFile="$WORK/list.txt" >"$WORK/mvn.log" 2>&1; then
  reason=$(grep -m1 -E 'ERROR' "$WORK/mvn.log" | sed -E 's/\x1b\[[0-9;]*m//g; s/^\[ERROR\] *//' | cut -c1-200)
  echo "delta-spark jars: Maven could not fetch $ARTIFACT (${reason:-see mvn output}); deltamv reads views with delta-rs" >&2
  exit 0
fi

mkdir -p "$WORK/jars"
copied=0
# Lines look like "   group:artifact:jar[:classifier]:version:scope:/path/file.jar -- module m".
while IFS= read -r line; do
  entry=${line%% -- *}
  entry=${entry#"${entry%%[![:space:]]*}"}
  case "$entry" in *.jar) ;; *) continue ;; esac
  file=${entry##*:}
  aid=$(cut -d: -f2 <<<"$entry")
  if compgen -G "$SPARK_JARS/${aid}-[0-9]*.jar" >/dev/null; then
    continue  # pyspark ships it
  fi
  cp "$file" "$WORK/jars/"
  copied=$((copied + 1))
done <"$WORK/list.txt"
if ! compgen -G "$WORK/jars/${ARTIFACT_ID}-*.jar" >/dev/null; then
  echo "delta-spark jars: Maven resolved $ARTIFACT but its jar is missing; deltamv reads views with delta-rs" >&2
  exit 0
fi

rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
mv "$WORK/jars" "$DEST"
echo "$ARTIFACT" >"$STAMP"
echo "delta-spark jars: $ARTIFACT and $((copied - 1)) dependencies in $DEST"
