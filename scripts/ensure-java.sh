#!/usr/bin/env bash
# Spark 4 needs Java 17 or newer. Install OpenJDK 17 with apt when it is missing.
set -euo pipefail
java_major() {
  java -version 2>&1 | sed -nE 's/.*version "([0-9]+).*/\1/p' | head -n1
}
if command -v java >/dev/null 2>&1 && [ "$(java_major)" -ge 17 ] 2>/dev/null; then
  exit 0
fi
echo "Java 17+ not found; installing openjdk-17-jre-headless with apt-get" >&2
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
$SUDO apt-get update -q
$SUDO apt-get install -y -q openjdk-17-jre-headless
java -version
