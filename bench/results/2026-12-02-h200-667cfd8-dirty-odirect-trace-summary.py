# Summarises the probe's stamps (2026-12-02-h200-bc5ca93-dirty-trace.patch): per tile, the median
# cycles of each phase, first consumer / second, and the producer's. Usage: python3 THIS DIR_OF_BINS
import numpy as np, sys, glob, os
def load(f):
    a=np.fromfile(f,dtype=np.uint32)
    return a.reshape(32,64,4,16).astype(np.int64)
names={'Qwait':(0,1),'turn0':(1,9),'K0wait':(9,10),'QK0':(10,2),'soft0':(2,3),'loop':(3,4),'turnPV':(4,8),'lastPV':(8,5),'fin':(5,6),'store':(6,7)}
for f in sorted(glob.glob(sys.argv[1]+'/*.bin')):
    a=load(f); tag=os.path.basename(f)[16:].replace("_overlap1","").replace("_pingpong1_ws1","").replace(".bin","")
    rows=[]
    for c in (1,2):
        ev=a[:,:,c,:]
        valid=(ev[:,:,7]>0)
        # tiles fully inside: require next round valid for gap
        res={}
        for n,(x,y) in names.items():
            d=(ev[:,:,y]-ev[:,:,x])[valid]; res[n]=np.median(d)
        nxt=np.zeros_like(ev[:,:,0]); nxt[:,:-1]=ev[:,1:,0]
        v2=valid & (np.roll(valid,-1,axis=1)) ; v2[:,-1]=False
        res['gap']=np.median((nxt-ev[:,:,7])[v2]); res['tile']=np.median((nxt-ev[:,:,0])[v2])
        rows.append(res)
    p=a[:,:,0,:]; pv=p[:,:,4]>0
    prod={'Qiss':np.median((p[:,:,1]-p[:,:,0])[pv]),'K0iss':np.median((p[:,:,2]-p[:,:,1])[pv]),'allKV':np.median((p[:,:,4]-p[:,:,0])[pv])}
    # producer round start relative to consumer0 tile start of same round
    lead=np.median((a[:,:,1,0]-a[:,:,0,0])[pv & (a[:,:,1,7]>0)])
    rounds=int(np.median((a[:,:,1,7]>0).sum(1)))
    print(f"{tag:70s} rounds {rounds:2d} | " + " ".join(f"{k} {rows[0][k]:.0f}/{rows[1][k]:.0f}" for k in rows[0]) + f" | prod Qiss {prod['Qiss']:.0f} K0iss {prod['K0iss']:.0f} allKV {prod['allKV']:.0f} lead {lead:.0f}")
