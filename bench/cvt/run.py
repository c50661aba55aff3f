# Times each conversion probe on the GPU: python3 run.py (after `python3 bench/nvrtc_cubin.py bench/cvt/cvt.cu`, which runs anywhere).
# Prints warp instructions per clock per SM of each op; a mixed kernel that takes the sum
# of its parts' times shares their pipe, one that takes the longer part's does not.
import ctypes, torch
torch.cuda.init(); torch.empty(1, device='cuda')
cu = ctypes.CDLL('libcuda.so.1')
mod = ctypes.c_void_p()
assert cu.cuModuleLoadData(ctypes.byref(mod), open('cvt.cubin', 'rb').read()) == 0
def fn(name):
    f = ctypes.c_void_p(); assert cu.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()) == 0; return f
blocks, threads = 132 * 16, 256
out = torch.empty(blocks * threads, device='cuda')
def launch(f, seed):
    p_out = ctypes.c_void_p(out.data_ptr()); p_seed = ctypes.c_float(seed)
    args = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(p_out), ctypes.c_void_p), ctypes.cast(ctypes.byref(p_seed), ctypes.c_void_p))
    assert cu.cuLaunchKernel(f, blocks, 1, 1, threads, 1, 1, 0, None, args, None) == 0
clock_ghz = torch.cuda.get_device_properties(0).clock_rate / 1e6 if hasattr(torch.cuda.get_device_properties(0), 'clock_rate') else None
for name, ops in [('ffma_only', 1), ('ex2_only', 1), ('cvt_only', 1), ('prmt_only', 1), ('ex2_cvt', 2), ('ex2_prmt', 2)]:
    f = fn(name)
    for _ in range(3): launch(f, 0.001)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
    e0.record()
    for _ in range(20): launch(f, 0.001)
    e1.record(); torch.cuda.synchronize()
    ms = e0.elapsed_time(e1) / 20
    steps = blocks * threads * 8 * 512 / 32  # warp-level chain steps (each `ops` instructions)
    print(f"{name:10s} {ms:.3f} ms  chain steps/ns/SM {steps / ms / 1e6 / 132:.3f}  (x{ops} instructions each)")
