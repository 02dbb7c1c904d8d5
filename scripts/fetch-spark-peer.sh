#!/usr/bin/env bash
# Fetch the plain-Spark peer's jars (spark-sql-kafka-0-10 nearest the pyspark version; from_avro is built in)
# with Maven into .cache/spark-peer (idempotent, fast when done). Jars pyspark already ships
# (same artifact, any version) are dropped so the peer runs on pyspark's own classpath.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.cache/spark-peer"
pom="$root/scripts/spark-peer/pom.xml"
stamp="$dest/.complete-$(cat "$pom" "$root"/scripts/spark-peer/token-shim/org/apache/spark/kafka010/*.java | sha1sum | cut -c1-12)"
if [[ -f "$stamp" ]]; then exit 0; fi
echo "fetching the Spark peer jars with Maven (first run only)..." >&2
rm -rf "$dest"
mkdir -p "$dest"
TIDEMARK_DEFAULT_MAVEN_REPO="$(mvn -q -B -f "$pom" help:evaluate \
    -Dexpression='project.repositories[0].url' -DforceStdout | sed 's/\x1b\[[0-9;]*m//g')"
export TIDEMARK_DEFAULT_MAVEN_REPO
mvn -q -B -s "$root/scripts/spark-peer/settings.xml" -f "$pom" dependency:copy-dependencies \
    -U -DoutputDirectory="$dest" -DincludeScope=runtime
python="${PYTHON:-$root/.venv/bin/python}"
pyspark_jars="$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
for jar in "$dest"/*.jar; do
    artifact="$(basename "$jar" | sed -E 's/-[0-9][^-]*(-[A-Za-z0-9.]+)*\.jar$//')"
    if compgen -G "$pyspark_jars/${artifact}-[0-9]*.jar" >/dev/null; then
        rm -f "$jar"
    fi
done
# spark-token-provider-kafka-0-10 is not served by the registry this machine reaches (any
# version); the connector needs four of its classes even without delegation tokens. Compile the
# no-token stand-ins in scripts/spark-peer/token-shim against pyspark's jars.
shim_src="$root/scripts/spark-peer/token-shim"
shim_out="$(mktemp -d)"
javac -nowarn -d "$shim_out" -cp "$pyspark_jars/*" $(find "$shim_src" -name '*.java')
jar cf "$dest/tidemark-kafka-token-shim.jar" -C "$shim_out" .
rm -rf "$shim_out"
touch "$stamp"
echo "Spark peer jars in $dest: $(ls "$dest" | tr '\n' ' ')" >&2
