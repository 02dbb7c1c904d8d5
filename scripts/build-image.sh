#!/usr/bin/env bash
# Build the Tidemark container image without a Docker engine and without a container registry.
#
#   scripts/build-image.sh [build]   base image (if missing), then the image from the Dockerfile
#   scripts/build-image.sh base      only the base image
#   scripts/build-image.sh run-flags the podman flags every `podman run` of the image needs on
#                                    this machine, one per line (the tests and the docs use them)
#
# The Dockerfile stays the one description of the image. Its FROM is PYTHON_IMAGE, by default
# the official python image, which cannot be pulled where no registry answers; so this script
# first makes an equivalent base from Debian packages: mmdebstrap (bookworm, minbase, with
# python3 = 3.11, python3-venv, python-is-python3, ca-certificates) imported into podman's
# storage as $BASE_IMAGE, and kept there, so later runs skip it. Then `podman build` (buildah)
# builds the Dockerfile with --build-arg PYTHON_IMAGE=$BASE_IMAGE.
#
# Package sources: mmdebstrap without a mirror argument falls back to its built-in default
# mirror, not to the machine's apt configuration. We pass the host's own apt source files
# instead (those that name the suite), so the base comes from wherever this machine's apt gets
# its packages; TIDEMARK_APT_SOURCES=FILE overrides that. The image's own `apt-get install`
# then uses the same sources, which mmdebstrap copies into the base.
#
# What the machine needs (found on a Debian bookworm VM with cgroup v1, as root):
#   - runc as OCI runtime: crun 1.8 (bookworm's) refuses a hybrid cgroup v1/v2 layout with
#     "cgroups in hybrid mode not supported, drop all controllers from cgroupv2";
#   - explicit --ulimit nofile/nproc on `podman run`: podman 4.3 asks for 1048576 of both, which
#     needs CAP_SYS_RESOURCE; without it: "setrlimit `RLIMIT_NOFILE`: Operation not permitted";
#   - host networking for the build (apt and pip inside RUN steps) and for running.
# The host's CA bundle and pip configuration are mounted read-only into the build's RUN steps
# (never copied into a layer), so a build behind a TLS-inspecting proxy verifies like the host.
#
# Environment:
#   TIDEMARK_IMAGE        the image to build (default localhost/tidemark:<project version>)
#   TIDEMARK_BASE_IMAGE   the base (default localhost/tidemark-base:bookworm)
#   TIDEMARK_PYTHON_IMAGE use this image (already in podman's storage: nothing is pulled) as
#                         PYTHON_IMAGE instead of building the base
#   TIDEMARK_APT_SOURCES  an apt sources file (one-line or deb822) for the base
#   TIDEMARK_OCI_RUNTIME  runc (default) or crun
#   TIDEMARK_REBUILD_BASE=1  rebuild the base even if it exists
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

say() { echo "build-image: $*" >&2; }

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n1)"
image="${TIDEMARK_IMAGE:-localhost/tidemark:${version}}"
base_image="${TIDEMARK_BASE_IMAGE:-localhost/tidemark-base:bookworm}"
suite="bookworm"
runtime="${TIDEMARK_OCI_RUNTIME:-runc}"

# ---- tools ---------------------------------------------------------------------------------
ensure_tools() {
    local missing=()
    command -v podman >/dev/null 2>&1 || missing+=(podman)
    command -v buildah >/dev/null 2>&1 || missing+=(buildah)
    command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
    command -v "$runtime" >/dev/null 2>&1 || missing+=("$runtime")
    [[ ${#missing[@]} -eq 0 ]] && return 0
    if [[ $(id -u) -ne 0 ]]; then
        say "missing ${missing[*]}; install them (apt-get install ${missing[*]}) or run as root"
        exit 2
    fi
    say "installing ${missing[*]} with apt-get..."
    export DEBIAN_FRONTEND=noninteractive
    # Package lists are fetched only when there are none, or when they are too old to install.
    if ! compgen -G "/var/lib/apt/lists/*_Packages*" >/dev/null \
        || ! apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
        apt-get update >&2
        apt-get install -y --no-install-recommends "${missing[@]}" >&2
    fi
}

# ---- flags for podman run ------------------------------------------------------------------
# nofile: the hard limit this process has (capped at podman's own 1048576). nproc: podman 4.3
# sets its own RLIMIT_NPROC to 32768 before it starts the runtime, so a container cannot get
# more than that, nor more than the host's hard limit.
run_flags() {
    local nofile nproc
    nofile="$(ulimit -Hn)"
    [[ "$nofile" == "unlimited" || "$nofile" -gt 1048576 ]] && nofile=1048576
    nproc="$(ulimit -Hu)"
    [[ "$nproc" == "unlimited" || "$nproc" -gt 32768 ]] && nproc=32768
    printf '%s\n' "--runtime=$runtime" "--ulimit=nofile=$nofile:$nofile" \
        "--ulimit=nproc=$nproc:$nproc"
}

# ---- base image from Debian packages -------------------------------------------------------
apt_sources() {
    if [[ -n "${TIDEMARK_APT_SOURCES:-}" ]]; then
        echo "$TIDEMARK_APT_SOURCES"
        return
    fi
    local file
    for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        /etc/apt/sources.list.d/*.sources; do
        [[ -f "$file" ]] || continue
        # Only sources that serve the suite: third-party repositories stay out of the image.
        if grep -v '^[[:space:]]*#' "$file" | grep -qw "$suite"; then
            echo "$file"
        fi
    done
    return 0
}

build_base() {
    if [[ -z "${TIDEMARK_REBUILD_BASE:-}" ]] && podman image exists "$base_image"; then
        say "base $base_image exists (TIDEMARK_REBUILD_BASE=1 rebuilds it)"
        return
    fi
    local work sources=()
    mapfile -t sources < <(apt_sources)
    # Without a source mmdebstrap would fall back to its built-in mirror: refuse instead.
    if [[ ${#sources[@]} -eq 0 ]]; then
        say "no apt source of this machine names $suite; set TIDEMARK_APT_SOURCES to a file"
        exit 2
    fi
    work="$(mktemp -d "${TMPDIR:-/var/tmp}/tidemark-base.XXXXXX")"
    # shellcheck disable=SC2064 # the directory is known now
    trap "rm -rf '$work'" EXIT
    say "building $base_image with mmdebstrap ($suite, minbase) from ${sources[*]}..."
    local started=$SECONDS
    # Documentation is left out as in Debian's slim images (copyright files stay); the dpkg
    # setting stays in the image, so packages the Dockerfile installs leave it out too. The man1
    # directory stays because update-alternatives links Java's man pages into it.
    mmdebstrap --variant=minbase --quiet \
        --include=python3,python3-venv,python-is-python3,ca-certificates \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --customize-hook='mkdir -p "$1/usr/share/man/man1"' \
        "$suite" "$work/base.tar" "${sources[@]}"
    podman import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["/bin/bash"]' \
        --message "Debian $suite minbase with python3 (mmdebstrap)" \
        "$work/base.tar" "$base_image" >/dev/null
    say "base $base_image built in $((SECONDS - started)) s"
}

# ---- the image -----------------------------------------------------------------------------
build_image() {
    local python_image="${TIDEMARK_PYTHON_IMAGE:-$base_image}"
    local mounts=()
    if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
        mounts+=(--volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
    fi
    [[ -f /etc/pip.conf ]] && mounts+=(--volume /etc/pip.conf:/etc/pip.conf:ro)
    say "building $image from the Dockerfile (PYTHON_IMAGE=$python_image)..."
    local started=$SECONDS previous
    previous="$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
    # --format docker keeps the Dockerfile's HEALTHCHECK (the OCI image format has none);
    # --pull=never: the base is local and no registry is asked for anything.
    podman build --runtime "$runtime" --network host --pull=never --layers --format docker \
        "${mounts[@]}" \
        --build-arg "PYTHON_IMAGE=$python_image" \
        --tag "$image" --file Dockerfile . >&2
    local image_seconds=$((SECONDS - started))
    # The image this tag named before is superseded: remove it unless a container still uses it
    # (its layers shared with the new one stay, and so does the build cache).
    if [[ -n "$previous" && "$previous" != "$(podman image inspect --format '{{.Id}}' "$image")" ]]; then
        podman rmi "$previous" >/dev/null 2>&1 || true
    fi
    local size
    size="$(podman image inspect --format '{{.Size}}' "$image")"
    say "image $image built in ${image_seconds} s; size $((size / 1000000)) MB (${size} bytes)"
}

command="${1:-build}"
case "$command" in
    run-flags)
        run_flags
        ;;
    base)
        ensure_tools
        build_base
        ;;
    build)
        total_started=$SECONDS
        ensure_tools
        [[ -n "${TIDEMARK_PYTHON_IMAGE:-}" ]] || build_base
        build_image
        say "done in $((SECONDS - total_started)) s"
        echo "$image"
        ;;
    *)
        echo "usage: $0 [build|base|run-flags]" >&2
        exit 2
        ;;
esac
