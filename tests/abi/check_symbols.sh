#!/usr/bin/env bash
# The library's dynamic symbol table against moejit.h (issue 16 item 3):
#  - the exported functions are exactly the MOEJIT_API functions of moejit.h (nothing C++ leaks);
#  - each has the symbol version of its node in moejit.map (MOEJIT_<x.y>, the release that
#    added it: the unsized *_init and all 0.1 entry points MOEJIT_0.1, the *_init_sized
#    MOEJIT_0.4, the experts entry and the configuration queries MOEJIT_0.6);
#  - the soname is libmoejit.so.<ABI major>;
#  - a binary linked without versions (the 0.1 stand-in) has unversioned references, as binaries
#    built against 0.1-0.3 do (so abi_old_binary_0_1 tests the default binding).
# usage: check_symbols.sh LIBRARY MOEJIT_H OLD_BINARY
set -euo pipefail
lib=$1 header=$2 old=$3
fail=0
err() { echo "FAIL: $*"; fail=1; }

# The function name is the identifier right before the '(' of its parameters on each MOEJIT_API
# line (written "(moejit_x_init)(" for the unsized *_init, which share their name with a macro);
# types end in _t and are skipped.
want=$(grep '^MOEJIT_API' "$header" | grep -o 'moejit_[a-z0-9_]*)\?(' | tr -d '()' | grep -v '_t$' | sort -u)
# objdump -T: "ADDR g DF .text SIZE VERSION NAME"; only defined (non-UND) global symbols.
table=$(objdump -T "$lib" | awk '$2 == "g" && $4 != "*UND*" { print $(NF-1), $NF }')
have=$(echo "$table" | awk '{ print $2 }' | grep -v '^MOEJIT_' | sort -u)
if [ "$want" != "$have" ]; then
    err "exported symbols differ from moejit.h's MOEJIT_API functions:"
    diff <(echo "$want") <(echo "$have") | sed 's/^/    /' || true
fi
# The node each symbol belongs to, from the version script beside the header (moejit.map):
# an entry point keeps the version of the release that added it.
map=$(dirname "$header")/moejit.map
declare -A node_of
node=
while read -r line; do
    case $line in
        MOEJIT_*'{'*) node=${line%% *} ;;
        moejit_*';') node_of[${line%;}]=$node ;;
    esac
done < "$map"
while read -r version name; do
    case $name in MOEJIT_*) continue ;; esac   # the version definitions themselves
    expect=${node_of[$name]:-}
    [ -n "$expect" ] || { err "$name is exported but not in $map"; continue; }
    [ "$version" = "$expect" ] || err "$name has version '$version', expected $expect"
done <<< "$table"
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
case $soname in libmoejit.so.[0-9]*) ;; *) err "soname is '$soname', expected libmoejit.so.<ABI major>" ;; esac
if objdump -T "$old" | grep 'moejit_' | grep -q 'MOEJIT_'; then
    err "$old references versioned symbols; it must stand for a binary built before versioning"
fi
[ $fail = 0 ] && echo "$(echo "$have" | wc -l) symbols, all versioned; soname $soname"
exit $fail
