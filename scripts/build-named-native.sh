#!/usr/bin/env bash
# Build BIND 9.18.49's named with fipstop's native FIPS query log (issue 23) into build/named-native/.
#
# Why a rebuilt named: the query line's cost is string building inside libns (log_query formats the name, type
# and class before any logging call), which no preload into stock named can skip.  contrib/bind/fips-native.patch
# adds a hook to log_query() that copies the line's fields out in binary (fipstop/csrc/fips_bindq.h) for
# libfips_bind.so to write into the thread's ring; the consumer formats the same line.  Without the preload the
# patched named logs exactly as BIND does.
#
# Source: the upstream tarball as Debian ships it (bind9_9.18.49.orig.tar.xz, the version of Debian 12's
# named), checked against the SHA-256 below.  Built with Debian's own optimisation (-O2 -g), shared libraries
# installed beside it (the binary's RUNPATH points there), no DoH/LMDB/libxml2/json-c/GeoIP/GSS-API/dnstap
# (the bench needs none of them).  Needs libuv1-dev, libnghttp2-dev, libcap-dev, libssl-dev (scripts/setup.sh).
# Idempotent: a stamp names the tarball, the patch and the header it was built from; takes ~1-2 min on 2 vCPUs.
#
# Usage: scripts/build-named-native.sh [--print-named]   (--print-named: the path of the built named, or exit 1)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=9.18.49
TARBALL="bind9_${VERSION}.orig.tar.xz"
SHA256=c43ce4548ebed788cd9df63658a7de105ceafba43fcd63fa352b1093e525cd24
URLS=("http://deb.debian.org/debian/pool/main/b/bind9/$TARBALL"
      "http://deb.debian.org/debian-security/pool/updates/main/b/bind9/$TARBALL")
OUT="$ROOT/build/named-native"
WORK="$ROOT/build/named-native-src"
PATCH="$ROOT/contrib/bind/fips-native.patch"
HEADER="$ROOT/fipstop/csrc/fips_bindq.h"
NAMED="$OUT/sbin/named"

say() { printf 'build-named-native: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

stamp_want="$(cat "$PATCH" "$HEADER" | sha256sum | cut -c1-16) $SHA256"
if [ "${1:-}" = "--print-named" ]; then
    [ -x "$NAMED" ] && [ "$(cat "$OUT/.stamp" 2>/dev/null)" = "$stamp_want" ] && { echo "$NAMED"; exit 0; }
    exit 1
fi
if [ -x "$NAMED" ] && [ "$(cat "$OUT/.stamp" 2>/dev/null)" = "$stamp_want" ]; then
    exit 0
fi

mkdir -p "$ROOT/build"
src_tar="$ROOT/build/$TARBALL"
if [ ! -s "$src_tar" ] || [ "$(sha256sum "$src_tar" | cut -d' ' -f1)" != "$SHA256" ]; then
    ok=0
    for u in "${URLS[@]}"; do
        say "downloading $u"
        if curl -fsS --retry 3 -o "$src_tar.part" "$u"; then ok=1; break; fi
    done
    [ "$ok" = 1 ] || die "could not download $TARBALL"
    got="$(sha256sum "$src_tar.part" | cut -d' ' -f1)"
    [ "$got" = "$SHA256" ] || die "$TARBALL: SHA-256 $got, expected $SHA256"
    mv "$src_tar.part" "$src_tar"
fi

rm -rf "$WORK" "$OUT"
mkdir -p "$WORK"
tar -xJf "$src_tar" -C "$WORK"
cd "$WORK/bind-$VERSION"
patch -p1 -s < "$PATCH" || die "contrib/bind/fips-native.patch does not apply to BIND $VERSION"
cp "$HEADER" lib/ns/include/ns/fips_bindq.h
say "configuring BIND $VERSION (log: $WORK/build.log)"
./configure --prefix="$OUT" --sysconfdir="$OUT/etc" --localstatedir="$OUT/var" \
    --disable-doh --without-lmdb --without-libxml2 --without-json-c --without-libidn2 --without-cmocka \
    --disable-geoip --without-gssapi --disable-dnstap --without-jemalloc \
    CFLAGS="-O2 -g" > "$WORK/build.log" 2>&1 || { tail -5 "$WORK/build.log" >&2; die "configure failed"; }
say "building lib/ and bin/named"
jobs="$(nproc 2>/dev/null || echo 2)"
{ make -j"$jobs" -C lib && make bind.keys.h && make -j"$jobs" -C bin/named &&
  make -C lib install && make -C bin/named install; } >> "$WORK/build.log" 2>&1 ||
    { tail -15 "$WORK/build.log" >&2; die "build failed"; }
"$NAMED" -V > /dev/null || die "the built named does not run"
echo "$stamp_want" > "$OUT/.stamp"
rm -rf "$WORK"
say "built $NAMED"
