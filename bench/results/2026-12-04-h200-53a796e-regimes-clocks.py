import json, datetime, statistics, re, sys
clk = []
for line in open('r/clocks.csv'):
    p = [x.strip() for x in line.split(',')]
    if p[0].startswith('timestamp') or len(p) < 6: continue
    t = datetime.datetime.strptime(p[0], '%Y/%m/%d %H:%M:%S.%f').replace(tzinfo=datetime.timezone.utc).timestamp()
    clk.append((t, float(p[1].split()[0]), float(p[3].split()[0])))
def rows(name):
    js = json.load(open(f'r/{name}.json'))
    # stamped log: the line of each row ends after its timing; the previous line's stamp starts it
    stamps = []
    for l in open(f'r/{name}.log'):
        m = re.match(r'^(\d+\.\d+) (.*)$', l.rstrip())
        if m: stamps.append((float(m.group(1)), m.group(2)))
    out = {}
    prev = None
    for t, text in stamps:
        m = re.search(r'(m\d+n\d+w\d+s\d+\S*)\s+[\d.]+\s+([\d.]+)', text)
        if m and prev is not None:
            cfg = m.group(1); tf = float(m.group(2))
            inside = [c for c in clk if prev + 0.3 <= c[0] <= t]
            sm = statistics.mean(c[1] for c in inside) if inside else float('nan')
            out[cfg] = (tf, sm)
        prev = t
    return out
for hd in ('d128', 'd64'):
    for p in (1, 2):
        s = rows(f'short-{hd}-{p}'); l = rows(f'long-{hd}-{p}')
        print(f'== {hd} pass {p}: config  short TF (MHz)  long TF (MHz)')
        for cfg in sorted(s, key=lambda c: -l.get(c, (0,0))[0]):
            a = s[cfg]; b = l.get(cfg, (float('nan'), float('nan')))
            print('  %-60s %6.1f (%4.0f)  %6.1f (%4.0f)' % (cfg, a[0], a[1], b[0], b[1]))
