"""Compare the .text (machine code) of two moejit cache folders' cubins, kernel by kernel.

A refactor that must not change code (issue 32's proof): warm the same presets for sm_90a with
the old and the new tree's moejit-warmup into two cache folders, then
    python3 dev/compare_cubin_text.py OLD/<version> NEW/<version>
Cache keys differ between trees (the key covers the library's sources); the machine code must
not. Exit 1 when any kernel's .text differs or is missing on either side."""
import os, glob, struct, sys, collections

def sections(elf):
    shoff, = struct.unpack_from('<Q', elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', elf, 0x3A)
    hdrs = [struct.unpack_from('<IIQQQQIIQQ', elf, shoff + i * shentsize) for i in range(shnum)]
    stroff = hdrs[shstrndx][4]
    out = {}
    for h in hdrs:
        name = elf[stroff + h[0]: elf.index(b'\0', stroff + h[0])].decode()
        out[name] = elf[h[4]: h[4] + h[5]] if h[1] != 8 else b''
    return out

def load(d):
    out = collections.defaultdict(list)
    for f in glob.glob(d + '/*.cubin'):
        name = os.path.basename(f).rsplit('.', 2)[0]
        b = open(f, 'rb').read(); elf = b[b.find(b'\x7fELF'):]
        out[name].append({k: v for k, v in sections(elf).items() if k.startswith('.text')})
    return out

a, b = load(sys.argv[1]), load(sys.argv[2])
same = [k for k in a if k in b and sorted(map(sorted, (x.items() for x in a[k]))) == sorted(map(sorted, (x.items() for x in b[k])))]
bad = sorted((set(a) | set(b)) - set(same))
print(f"kernels: {len(a)} before, {len(b)} after; .text identical: {len(same)}; differ or missing: {bad}")
sys.exit(1 if bad else 0)
