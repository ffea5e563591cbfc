#!/usr/bin/env bash
# Set up everything fipstop needs on Debian 12, idempotently:
#   - Debian packages (installed only when missing; apt-get update only then),
#   - .venv in the repo with `pip install -e '.[test]'` (builds fipstop._fips and
#     fipstop/lib/libfips.so in the source tree),
#   - the C library and the C examples (make lib examples).
# Run as root (or with sudo available). Safe to run again: it only does what is missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

say() { printf 'setup: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# --- Debian packages ------------------------------------------------------
# python3-bpfcc/bpfcc-tools + linux-headers: eBPF profiles (the running kernel may ship no headers: see
# fipstop/profile/kheaders.py); fail2ban, nftables, auditd, iproute2: the IPS, backends and their tests;
# libpcre2-8-0: fipstop._ipsfast (the IPS matcher) dlopens it; librsvg2-bin + fonts-firacode: scripts/screenshots.py's
# PNGs (rsvg-convert, and the font textual's SVGs ask for); prometheus: promtool (check metrics, test rules) and the
# server the scrape test runs; monitoring-plugins-basic: check_procs, the oracle of fipstop check's threshold table;
# libconfig-dev: the FIPS paper's prototype (third_party FIPS-IPC) builds against it for tests and `fipstop bench ring`;
# crowdsec + crowdsec-firewall-bouncer: the third IPS of `fipstop bench attack` and a ban source of the Bans panel
# (run offline with configs of their own; the post-install needs the step before apt-get below);
# bind9-dev: BIND's headers, the struct offsets of libfips_bind.so (`fipstop wrap --bind`); fstrm-bin: fstrm_capture,
# the dnstap reader of `fipstop bench bind` mode dnstap.
DEB_PACKAGES=(build-essential python3 python3-venv python3-dev rsyslog tmux bind9 bind9-utils bind9-dnsutils dnsperf
              python3-bpfcc bpfcc-tools fail2ban nftables auditd iproute2 libpcre2-8-0 librsvg2-bin fonts-firacode
              "linux-headers-amd64" prometheus monitoring-plugins-basic libconfig-dev crowdsec crowdsec-firewall-bouncer
              bind9-dev fstrm-bin)
# fipstop bench ring's peers, built by the bench itself (issue 21): boost::lockfree::spsc_queue, LTTng-UST, spdlog
DEB_PACKAGES+=(libboost-dev liblttng-ust-dev lttng-tools libspdlog-dev)
# named with the native FIPS query log (scripts/build-named-native.sh, issue 23): BIND 9.18's build dependencies
DEB_PACKAGES+=(libuv1-dev libnghttp2-dev libcap-dev libssl-dev pkg-config curl xz-utils patch)

missing=()
for pkg in "${DEB_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$pkg")
    fi
done
if ((${#missing[@]})); then
    SUDO=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || die "need root to install: ${missing[*]}"
        SUDO=(sudo)
    fi
    # CrowdSec's post-install registers with the online API (CAPI) unless its credentials file exists and is not
    # empty; offline that fails and leaves apt with a half-configured package. fipstop never uses the CAPI.
    if [[ " ${missing[*]} " == *" crowdsec "* ]] && [ ! -s /etc/crowdsec/online_api_credentials.yaml ]; then
        "${SUDO[@]}" mkdir -p /etc/crowdsec
        echo "# no online API: fipstop runs crowdsec offline (scripts/setup.sh)" | \
            "${SUDO[@]}" tee /etc/crowdsec/online_api_credentials.yaml >/dev/null
    fi
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -qq
    "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- Python virtual environment -------------------------------------------
# Prefer the python3 in PATH (it may be pyenv's), fall back to Debian's.
pick_python() {
    local cand
    for cand in "$(command -v python3 || true)" /usr/bin/python3; do
        [ -n "$cand" ] && [ -x "$cand" ] || continue
        if "$cand" -c 'import sys, venv, sysconfig, os
sys.exit(0 if sys.version_info >= (3, 11)
         and os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)' \
            2>/dev/null; then
            echo "$cand"
            return 0
        fi
    done
    return 1
}

VENV="$ROOT/.venv"
PY="$VENV/bin/python"
if [ ! -x "$PY" ] || ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    BASE_PY="$(pick_python)" || die "no python3 >= 3.11 with venv and Python.h found"
    say "creating .venv with $BASE_PY"
    rm -rf "$VENV"
    "$BASE_PY" -m venv "$VENV"
fi

# Install (editable) when the packaging files changed since the last install
# or fipstop is not importable from the venv; C changes are picked up by
# `make lib` below, which rebuilds only what is out of date.
stamp="$VENV/.fipstop-install"
want="$(cat pyproject.toml setup.py | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ] \
    || ! "$PY" -c 'import fipstop._fips, fipstop.cli' >/dev/null 2>&1; then
    say "installing fipstop into .venv (pip install -e '.[test]')"
    export PIP_DISABLE_PIP_VERSION_CHECK=1
    # Quiet setuptools' notes that pyproject ext-modules are "experimental" and
    # what an editable install is; real warnings and compiler output still show.
    export PYTHONWARNINGS="ignore::UserWarning:setuptools.config.pyprojecttoml,ignore::UserWarning:setuptools.command.editable_wheel"
    "$PY" -m pip install -q --upgrade pip 'setuptools>=74.1'
    # No build isolation: the venv's setuptools also serves `make lib`.
    "$PY" -m pip install -q --no-build-isolation -e '.[test]'
    echo "$want" >"$stamp"
fi

# bcc comes from Debian's python3-bpfcc (PyPI's "bcc" is an unrelated package):
# link that one package into the venv, nothing else from dist-packages.
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ -d /usr/lib/python3/dist-packages/bcc ] && [ ! -e "$SITE/bcc" ]; then
    ln -s /usr/lib/python3/dist-packages/bcc "$SITE/bcc"
fi

# --- C library and examples ------------------------------------------------
say "building libfips and the C examples"
make -C "$ROOT" --no-print-directory -s lib examples
# BIND 9.18.49 with contrib/bind/fips-native.patch into build/named-native/ (~1-2 min once; then a stamp check)
"$ROOT/scripts/build-named-native.sh"
say "ready"
