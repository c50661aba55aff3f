# Builds a probe's cubin with NVRTC for sm_90a (no GPU needed), printing ptxas's report:
# python3 bench/nvrtc_cubin.py bench/mufu/mufu.cu   -> bench/mufu/mufu.cubin
import ctypes, sys
src_path = sys.argv[1]
lib = ctypes.CDLL('libnvrtc.so.13')
src = open(src_path).read().encode()
prog = ctypes.c_void_p()
assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, src_path.encode(), 0, None, None) == 0
opts = [b"--gpu-architecture=sm_90a", b"-std=c++17", b"--ptxas-options=-v"]
arr = (ctypes.c_char_p * len(opts))(*opts)
r = lib.nvrtcCompileProgram(prog, len(opts), arr)
n = ctypes.c_size_t(); lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n)); log = ctypes.create_string_buffer(n.value); lib.nvrtcGetProgramLog(prog, log)
print(r, log.value.decode()[:3000])
n = ctypes.c_size_t(); lib.nvrtcGetCUBINSize(prog, ctypes.byref(n)); buf = ctypes.create_string_buffer(n.value); lib.nvrtcGetCUBIN(prog, buf)
open(src_path.rsplit('.', 1)[0] + '.cubin', 'wb').write(buf.raw)
