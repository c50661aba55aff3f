# Builds cvt.cubin from cvt.cu with NVRTC (here, no GPU needed): python3 build.py
import ctypes, sys
lib = ctypes.CDLL('libnvrtc.so.13')
src = open('cvt.cu').read().encode()
prog = ctypes.c_void_p()
assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"cvt.cu", 0, None, None) == 0
opts = [b"--gpu-architecture=sm_90a", b"-std=c++17", b"--ptxas-options=-v"]
arr = (ctypes.c_char_p * len(opts))(*opts)
r = lib.nvrtcCompileProgram(prog, len(opts), arr)
n = ctypes.c_size_t(); lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n)); log = ctypes.create_string_buffer(n.value); lib.nvrtcGetProgramLog(prog, log)
print(r, log.value.decode()[:3000])
n = ctypes.c_size_t(); lib.nvrtcGetCUBINSize(prog, ctypes.byref(n)); buf = ctypes.create_string_buffer(n.value); lib.nvrtcGetCUBIN(prog, buf)
open('cvt.cubin','wb').write(buf.raw)
