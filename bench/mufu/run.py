# Times each MUFU form on the GPU and prints the SASS op counts: python3 run.py (after `python3 bench/nvrtc_cubin.py bench/mufu/mufu.cu`)
import ctypes, torch, subprocess, shutil, math
torch.cuda.init(); torch.empty(1, device='cuda')
cu = ctypes.CDLL('libcuda.so.1')
mod = ctypes.c_void_p()
data = open('mufu.cubin','rb').read()
assert cu.cuModuleLoadData(ctypes.byref(mod), data) == 0
def fn(name):
    f = ctypes.c_void_p(); assert cu.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()) == 0; return f
blocks, threads = 132 * 16, 256
out = torch.empty(blocks * threads, device='cuda')
def launch(f, seed):
    p_out = ctypes.c_void_p(out.data_ptr()); p_seed = ctypes.c_float(seed)
    args = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(p_out), ctypes.c_void_p), ctypes.cast(ctypes.byref(p_seed), ctypes.c_void_p))
    assert cu.cuLaunchKernel(f, blocks, 1, 1, threads, 1, 1, 0, None, args, None) == 0
sm_clock = torch.cuda.get_device_properties(0)
for name, per in [('tanh_f32',1),('tanh_f16x2',2),('tanh_bf16x2',2),('ex2_f32',1),('ex2_f16x2',2),('ex2_bf16x2',2)]:
    f = fn(name)
    for _ in range(3): launch(f, 0.001)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
    e0.record()
    for _ in range(20): launch(f, 0.001)
    e1.record(); torch.cuda.synchronize()
    ms = e0.elapsed_time(e1) / 20
    insts = blocks * threads * 8 * 512 / 32  # warp instructions
    elems = blocks * threads * 8 * 512 * per
    print(f"{name:12s} {ms:.3f} ms  {elems/ms/1e6/132:.1f} G elems/s/SM  warp-insts/ns/SM {insts/ms/1e6/132:.3f}")
# accuracy of tanh f32 vs f16x2 approx
x = torch.linspace(-12, 12, 200001, device='cuda')
o32 = torch.empty_like(x); o16 = torch.empty_like(x)
f = fn('tanh_acc')
n = ctypes.c_int(x.numel()); pi, p32, p16 = [ctypes.c_void_p(t.data_ptr()) for t in (x, o32, o16)]
args = (ctypes.c_void_p * 4)(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in (pi, p32, p16, n)])
assert cu.cuLaunchKernel(f, (x.numel() + 255)//256, 1, 1, 256, 1, 1, 0, None, args, None) == 0
torch.cuda.synchronize()
ref = torch.tanh(x.double())
print('tanh f32 approx max abs err', (o32.double()-ref).abs().max().item(), ' f16x2', (o16.double()-ref).abs().max().item())
for tool in ['cuobjdump', 'nvdisasm']:
    print(tool, shutil.which(tool))
if shutil.which('cuobjdump'):
    s = subprocess.run(['cuobjdump', '-sass', 'mufu.cubin'], capture_output=True, text=True).stdout
    import re
    cur = None; counts = {}
    for line in s.split('\n'):
        m = re.search(r'Function : (\w+)', line)
        if m: cur = m.group(1); counts[cur] = {}
        m = re.search(r'(MUFU\.\S+|HADD2\S*|F2FP\S*|PRMT)', line)
        if m and cur: counts[cur][m.group(1)] = counts[cur].get(m.group(1), 0) + 1
    for k, v in counts.items(): print(k, v)
