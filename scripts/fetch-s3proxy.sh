#!/usr/bin/env bash
# Fetch with Maven, into .cache/ (idempotent, fast when done): S3Proxy, the S3-compatible server
# the tests keep s3a:// checkpoints on (.cache/s3proxy/libs), and Spark's s3a:// filesystem,
# hadoop-aws with its AWS SDK bundle (.cache/hadoop-aws/libs). hadoop-aws must match the Hadoop
# version of pyspark's own jars; this script refuses to fetch another.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

fetch() {  # fetch NAME: scripts/NAME/pom.xml's runtime dependencies into .cache/NAME/libs
    local name="$1" dest="$root/.cache/$1/libs"
    local stamp="$dest/.complete-$(cat "$root/scripts/$name/pom.xml" "$0" | sha1sum | cut -c1-12)"
    if [[ -f "$stamp" ]]; then return 0; fi
    echo "fetching $name with Maven (first run only)..." >&2
    rm -rf "$dest"
    mkdir -p "$dest"
    mvn -q -B -f "$root/scripts/$name/pom.xml" dependency:copy-dependencies \
        -DoutputDirectory="$dest" -DincludeScope=runtime
    touch "$stamp"
    echo "$name jars in $dest ($(ls "$dest" | wc -l) files)" >&2
}

python="${PYTHON:-$root/.venv/bin/python}"
if [[ -x "$python" ]]; then
    wanted="$(sed -n 's:.*<hadoop.version>\(.*\)</hadoop.version>.*:\1:p' "$root/scripts/hadoop-aws/pom.xml")"
    jars="$("$python" -c 'import pathlib, pyspark; print(pathlib.Path(pyspark.__file__).parent / "jars")')"
    if [[ ! -f "$jars/hadoop-client-api-$wanted.jar" ]]; then
        echo "scripts/hadoop-aws/pom.xml names Hadoop $wanted, but pyspark ships" \
            "$(cd "$jars" && ls hadoop-client-api-*.jar): set hadoop.version to that version" >&2
        exit 1
    fi
fi
fetch s3proxy
fetch hadoop-aws
