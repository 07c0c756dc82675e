#!/bin/sh
# Makes a libtlp.a whose only global symbols are the LibTLP API (crates/capi/libtlp.syms).
#
# cargo's staticlib holds every object of the Rust standard library with its symbols
# global (compiler built-ins such as __addvdi3, the Rust allocator shims, ...). This links
# the members the API needs into one relocatable object (`ld -r`, unused sections
# dropped), makes every defined symbol but the API local (`objcopy`), and archives that
# one object. Needs GNU binutils (ld, objcopy, ar).
#
# Usage: libtlp-archive.sh IN.a OUT.a [SYMS]
set -eu
in=$1
out=$2
syms=${3:-$(dirname "$0")/../libtlp.syms}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
undef=""
while read -r s; do
	[ -n "$s" ] && undef="$undef -u $s"
done <"$syms"
# shellcheck disable=SC2086 # one -u per API symbol
${LD:-ld} -r --gc-sections $undef -o "$tmp/libtlp.o" "$in"
# The bitcode some members embed for LTO (.llvmbc) is not needed to link against C.
${OBJCOPY:-objcopy} --remove-section=.llvmbc --remove-section=.llvmcmd \
	--keep-global-symbols="$syms" "$tmp/libtlp.o"
rm -f "$out"
${AR:-ar} rcs "$out" "$tmp/libtlp.o"
