#!/usr/bin/env python3
"""Feature costs and peer ratios from one call of bench/results/*-featpeers-call.sh:

    python3 bench/feature_costs.py DIR      (DIR: the call's r/ folder, unpacked)

Per (head dim, length): TFLOP/s of the tuned picks of both templates (the mean of the
passes in the *-2.json and *-3.json rows of `fa4-gen bench`) and of FA4 and FlexAttention
(peers.json from bench/peers_features.py); the Hopper picks over FA4 and Flex; and each
feature's cost, its TFLOP/s over causal's at the same shape (a window's on the pairs it
leaves), for the Hopper and portable picks and for FA4.
"""
import json,glob,sys,collections
d=sys.argv[1]
ours=collections.defaultdict(list)  # (template, hd, s, kind) -> tflops list (tuned rows)
for f in glob.glob(d+'/*-[23].json'):
    for r in json.load(open(f)):
        if 'tflops' not in r: continue
        if not r['backend'].endswith('-tuned'): continue
        tmpl='portable' if r['kernel'].startswith('portable') else 'hopper'
        feat=r['features']; fs='sinks' if feat['sinks'] else ('softcap' if feat['softcap'] else 'none')
        if r.get('layer'): kind=r['layer']
        elif r['mask']=='local': kind='w%d'%r['window'][0]
        else: kind='causal' if fs=='none' else fs
        ours[(tmpl,r['hdim'],r['seqlen'],kind)].append(r['tflops'])
peer={}
for r in json.load(open(d+'/peers.json')):
    if 'tflops' not in r: continue
    if r['layer']: kind=r['layer']
    elif r['window']>=0: kind='w%d'%r['window']
    else: kind='causal' if r['feature']=='none' else r['feature']
    peer[(r['backend'],r['hdim'],r['seqlen'],kind)]=r['tflops']
def m(x): return sum(x)/len(x) if x else float('nan')
print('%-4s %-6s %-20s %8s %8s %8s %8s | %6s %6s | %6s %6s %6s'%('hd','seqlen','cell','hopper','portable','fa4','flex','H/fa4','H/flex','costH','costP','costFA4'))
kinds=['causal','w128','w1024','w4096','sinks','softcap']
for hd in (64,128):
  for s in (4096,16384):
    base={t:m(ours[(t,hd,s,'causal')]) for t in ('hopper','portable')}
    bf=peer.get(('fa4',hd,s,'causal'),float('nan'))
    for k in kinds:
        h=m(ours[('hopper',hd,s,k)]); p=m(ours[('portable',hd,s,k)])
        f=peer.get(('fa4',hd,s,k),float('nan')); fx=peer.get(('flex',hd,s,k),float('nan'))
        print('%-4d %-6d %-20s %8.1f %8.1f %8.1f %8.1f | %6.3f %6.3f | %6.3f %6.3f %6.3f'%(hd,s,k,h,p,f,fx,h/f,h/fx,h/base['hopper'],p/base['portable'],f/bf))
for k in ('gpt-oss-20b-sliding','gpt-oss-20b-full'):
    h=m(ours[('hopper',64,4096,k)]); p=m(ours[('portable',64,4096,k)]); f=peer.get(('fa4',64,4096,k),float('nan'))
    print('%-4d %-6d %-20s %8.1f %8.1f %8.1f %8s | %6.3f'%(64,4096,k,h,p,f,'-',h/f))
