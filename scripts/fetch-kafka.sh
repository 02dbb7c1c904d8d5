#!/usr/bin/env bash
# Fetch the Apache Kafka broker jars with Maven into .cache/kafka/libs (idempotent, fast when done).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.cache/kafka/libs"
stamp="$dest/.complete-$(sha1sum "$root/scripts/kafka/pom.xml" | cut -c1-12)"
if [[ -f "$stamp" ]]; then exit 0; fi
echo "fetching the Kafka broker jars with Maven (first run only)..." >&2
rm -rf "$dest"
mkdir -p "$dest"
mvn -q -B -f "$root/scripts/kafka/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$dest" -DincludeScope=runtime
touch "$stamp"
echo "Kafka jars in $dest ($(ls "$dest" | wc -l) files)" >&2
