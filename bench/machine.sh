# machine.sh — sourced by the bench scripts: print_machine names the CPU and the vector and half
# features every benchmark table must state (read from /proc/cpuinfo, not assumed).
print_machine() {
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16|avx512_fp16)$' | tr '\n' ' ')"
}
