#!/bin/sh
# install-venv.sh dependencies|tidelog: tidelog's virtual environment in /opt/tidelog, in two
# steps so that the dependencies are an image layer of their own, rebuilt only when
# pyproject.toml or the wheelhouse change, never when only tidelog's source does.
# With wheels in /wheels (scripts/docker-engine.sh puts them there, for machines whose containers
# cannot reach a package index) everything is installed from there alone.
set -eu
VENV=/opt/tidelog
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
if ls /wheels/*.whl >/dev/null 2>&1; then
    export PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels
fi
case "$1" in
dependencies)
    python3.11 -m venv "$VENV"
    python3.11 -c 'import tomllib; print("\n".join(tomllib.load(open("/src/pyproject.toml", "rb"))["project"]["dependencies"]))' >/tmp/requirements.txt
    # setuptools and wheel: to install tidelog itself without build isolation (no index needed)
    "$VENV/bin/pip" install -q -r /tmp/requirements.txt "setuptools>=68" wheel
    ;;
tidelog)
    "$VENV/bin/pip" install -q --no-deps --no-build-isolation /src
    ;;
*)
    echo "usage: install-venv.sh dependencies|tidelog" >&2
    exit 2
    ;;
esac
