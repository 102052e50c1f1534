#!/usr/bin/env bash
# SASS of a .cu file's sm_90 kernels on a machine without cuobjdump (the developers' machines have
# nvcc 13 but no disassembler): compiles FILE.cu to a cubin with the project's flags, disassembles
# it with the nvdisasm of Debian's non-free nvidia-cuda-toolkit 11.8 (downloaded once, unpacked
# under /tmp, nothing installed), after rewriting the four ELF header fields whose encoding CUDA 12
# changed (the code sections are the same), and prints per kernel: registers-free summary of the
# main loop (from the barrier before the first HMMA to the branch after the last one), total HMMA
# and local-memory (LDL/STL) counts. Usage: tools/sass_stats.sh FILE.cu [KERNEL_REGEX]
# Trap: the 11.8 disassembler may not know every sm_90 instruction a newer ptxas emits (wgmma shows
# as unknown); HMMA, LDSM, LDGSTS and the integer ALU instructions decode correctly.
set -euo pipefail
src="$1"; pattern="${2:-.}"; root="$(cd "$(dirname "$0")/.." && pwd)"; tmp=/tmp/cnn-sass; mkdir -p "$tmp"
nvdisasm="$tmp/root/usr/bin/nvdisasm"
if [ ! -x "$nvdisasm" ]; then
  mkdir -p "$tmp/sources" "$tmp/lists/partial" "$tmp/debs"
  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: non-free\nSigned-By: %s\n' \
    /usr/share/keyrings/debian-archive-keyring.gpg > "$tmp/sources/non-free.sources"
  o=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$tmp/sources" -o "Dir::State::Lists=$tmp/lists")
  apt-get "${o[@]}" update -qq
  (cd "$tmp/debs" && apt-get "${o[@]}" download nvidia-cuda-toolkit 2>/dev/null)
  dpkg -x "$tmp"/debs/nvidia-cuda-toolkit_*.deb "$tmp/root"
fi
cubin="$tmp/$(basename "$src" .cu).cubin"
/usr/local/cuda/bin/nvcc -O3 -DNDEBUG -arch=sm_90 -std=c++17 --expt-relaxed-constexpr -DCNN_WITH_CUDA=1 \
  -DFMT_HEADER_ONLY -I"$root/lib" -cubin -o "$cubin" "$src"
python3 - "$cubin" "$nvdisasm" "$pattern" <<'EOF'
import collections, re, struct, subprocess, sys
cubin, nvdisasm, pattern = sys.argv[1:4]
d = bytearray(open(cubin, 'rb').read())
d[7], d[8] = 0x33, 7                    # OS/ABI and ABI version as CUDA 11 wrote them
struct.pack_into('<I', d, 20, 0x76)     # e_version
struct.pack_into('<I', d, 48, 0x5a055a)  # e_flags: sm_90
open(cubin + '.old', 'wb').write(d)
sass = subprocess.run([nvdisasm, '-c', cubin + '.old'], capture_output=True, text=True, check=True).stdout
print(f"whole file: {sass.count('HMMA')} HMMA, {len(re.findall(r'[^A-Z](LDL|STL)[ .]', sass))} LDL/STL")
for sec in re.split(r'\n//-+ \.text\.', sass)[1:]:
    name = sec.split(' ', 1)[0]
    if not re.search(pattern, name):
        continue
    demangled = subprocess.run(['c++filt', name], capture_output=True, text=True).stdout.strip()
    lines = [re.sub(r'^\s*/\*[0-9a-f]+\*/\s*', '', l).strip() for l in sec.splitlines()
             if re.search(r'/\*[0-9a-f]{4,}\*/', l)]
    hmma = [i for i, l in enumerate(lines) if 'HMMA' in l]
    if not hmma:
        continue
    lo = max([i for i, l in enumerate(lines) if 'BAR.SYNC' in l and i < hmma[0]] or [0])
    hi = min([i for i, l in enumerate(lines) if i > hmma[-1] and 'BRA' in l] or [len(lines) - 1])
    ops = collections.Counter(re.sub(r'^@!?U?P\w+\s+', '', t).split()[0].split('.')[0] for t in lines[lo:hi + 1])
    print(f"{re.sub(r'[(].*', '', demangled)}\n  {len(lines)} instructions, main loop {hi - lo + 1}: "
          + ", ".join(f"{k} {v}" for k, v in ops.most_common(12)))
EOF
