#!/usr/bin/env bash
# Build the tests' schema registry (Apicurio Registry, in-memory storage, Confluent-compatible
# API) from Maven Central into .cache/schema-registry/app (idempotent, fast when done).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
src="$root/scripts/schema-registry"
dest="$root/.cache/schema-registry"
stamp="$dest/app/.complete-$(cat "$src/pom.xml" "$src/tidemark.properties" "$0" | sha1sum | cut -c1-12)"
if [[ -f "$stamp" ]]; then exit 0; fi
echo "building the schema registry for the tests with Maven (first run only)..." >&2
build="$dest/build"
rm -rf "$dest"
mkdir -p "$build/src/main/resources"
cp "$src/pom.xml" "$build/pom.xml"
version="$(sed -n 's:.*<apicurio.version>\(.*\)</apicurio.version>.*:\1:p' "$src/pom.xml")"
mvn -q -B -f "$build/pom.xml" dependency:copy \
    -Dartifact="io.apicurio:apicurio-registry-app:$version" -DoutputDirectory="$build/upstream"
# The registry's own settings, then ours.
python3 - "$build/upstream/apicurio-registry-app-$version.jar" \
    "$build/src/main/resources/application.properties" <<'PY'
import sys
import zipfile

with zipfile.ZipFile(sys.argv[1]) as jar, open(sys.argv[2], "wb") as out:
    out.write(jar.read("application.properties"))
PY
cat "$src/tidemark.properties" >> "$build/src/main/resources/application.properties"
mvn -q -B -f "$build/pom.xml" package -DskipTests
mkdir -p "$dest/app"
mv "$build/target/lib" "$dest/app/lib"
mv "$build/target/schema-registry-1-runner.jar" "$dest/app/schema-registry.jar"
rm -rf "$build"
touch "$stamp"
echo "schema registry in $dest/app ($(ls "$dest/app/lib" | wc -l) jars)" >&2
