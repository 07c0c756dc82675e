#!/usr/bin/env bash
# Installs libtlp (the LibTLP-compatible C library of crates/capi) under a prefix:
#   PREFIX/lib/libtlp.a, PREFIX/lib/libtlp.so, PREFIX/include/{libtlp.h,tlp.h}
#   and PREFIX/lib/pkgconfig/libtlp.pc (from crates/capi/libtlp.pc.in).
#
#   scripts/install-libtlp.sh [PREFIX [LIB_DIR]]
#
# PREFIX defaults to /usr/local. LIB_DIR is where libtlp.a and libtlp.so already are;
# without it the library is built first (cargo build --release -p pcielab-capi).
# Then: cc prog.c $(pkg-config --cflags --libs libtlp)       (shared)
#       cc prog.c $(pkg-config --static --cflags --libs libtlp)  (with libtlp.a only)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${1:-/usr/local}"
lib_dir="${2:-}"
if [ -z "$lib_dir" ]; then
  cargo build --release -p pcielab-capi --manifest-path "$root/Cargo.toml"
  lib_dir="${CARGO_TARGET_DIR:-$root/target}/release"
fi
for f in libtlp.a libtlp.so; do
  [ -f "$lib_dir/$f" ] || { echo "install-libtlp: $lib_dir/$f: not found" >&2; exit 2; }
done
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)"
[ -n "$version" ] || { echo "install-libtlp: no version in $root/Cargo.toml" >&2; exit 2; }

install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 644 "$lib_dir/libtlp.a" "$prefix/lib/libtlp.a"
install -m 755 "$lib_dir/libtlp.so" "$prefix/lib/libtlp.so"
install -m 644 "$root/crates/capi/include/libtlp.h" "$root/crates/capi/include/tlp.h" "$prefix/include/"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" \
  "$root/crates/capi/libtlp.pc.in" > "$prefix/lib/pkgconfig/libtlp.pc"
echo "installed libtlp $version under $prefix (pkg-config: PKG_CONFIG_PATH=$prefix/lib/pkgconfig)"
