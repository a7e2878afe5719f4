#!/usr/bin/env python3
# stats_reference.py — computes, once, the reference values tests/report/test_stats.c checks:
# exact Mann–Whitney p-values and critical values by enumerating every split of the pooled sample,
# tie-corrected normal p-values (scipy's asymptotic formula, written out), Hodges–Lehmann
# estimates and Moses intervals from all pairwise differences, t and normal quantiles with mpmath.
# Needs only python3 and mpmath (Debian: python3-mpmath). Run: python3 tests/report/stats_reference.py
import itertools, math
from fractions import Fraction
import mpmath as mp
mp.mp.dps = 30

def U(x, y):  # y over x
    return sum((1.0 if b > a else 0.5 if b == a else 0.0) for a in x for b in y)

def exact_perm_p_greater(x, y):
    # brute force: all ways to choose which len(y) of the pooled values are "y"
    pool = list(x) + list(y); N = len(pool); n = len(y)
    u0 = U(x, y); cnt = 0; tot = 0
    for idx in itertools.combinations(range(N), n):
        s = set(idx)
        yy = [pool[i] for i in idx]; xx = [pool[i] for i in range(N) if i not in s]
        tot += 1
        if U(xx, yy) >= u0 - 1e-12: cnt += 1
    return Fraction(cnt, tot)

def counts(m, n):
    # number of arrangements with U=u by brute force over positions of y's among ranks
    c = [0]*(m*n+1)
    for idx in itertools.combinations(range(m+n), n):
        # U = sum over y of number of x below it
        u = sum(pos - k for k, pos in enumerate(idx))
        c[u] += 1
    return c

def crit(m, n, alpha):
    c = counts(m, n); tot = sum(c); cum = 0; best = -1
    for u, f in enumerate(c):
        cum += f
        if Fraction(cum, tot) <= alpha: best = u
        else: break
    return best

print("critical values (largest c with P(U<=c) <= a)")
for (m,n,a) in [(5,5,Fraction(25,1000)),(10,10,Fraction(25,1000)),(5,10,Fraction(25,1000)),(5,5,Fraction(1,100)),(10,10,Fraction(1,100)),(4,4,Fraction(1,100)),(6,8,Fraction(5,100)),(8,8,Fraction(25,1000))]:
    print(m,n,float(a),crit(m,n,a))

def normal_p_greater(x, y):
    m, n = len(x), len(y); N = m+n
    u = U(x, y)
    pool = sorted(list(x)+list(y))
    from collections import Counter
    T = sum(t**3 - t for t in Counter(pool).values())
    var = m*n/12.0*((N+1) - T/(N*(N-1)))
    z = (u - m*n/2 - 0.5)/math.sqrt(var)
    return u, 0.5*math.erfc(z/math.sqrt(2))

cases = {
 "A": ([1.1,2.3,3.5,4.2,5.9],[2.0,4.8,6.1,7.3,8.4]),
 "B": ([10.0,11.0,12.0,13.0,14.0],[15.0,16.0,17.0,18.0,19.0]),
 "C": ([3.1,1.2,5.5,4.4],[2.2,6.6,7.7,0.5,8.8,9.9]),
}
for k,(x,y) in cases.items():
    print(k, "U", U(x,y), "exact p_greater", exact_perm_p_greater(x,y), float(exact_perm_p_greater(x,y)), "p_less", float(exact_perm_p_greater(y,x)))
tie = ([1,2,2,3,4],[2,3,3,5,6])
print("ties U/normal p_greater", normal_p_greater(*tie), "p_less", normal_p_greater(tie[1],tie[0]))
tie2 = ([0.85]*5,[0.84]*5)
print("tie2 p_less (cand lower)", normal_p_greater(tie2[1], tie2[0]))

def hl(x, y, conf):
    d = sorted(b - a for a in x for b in y); mn = len(d)
    est = d[mn//2] if mn % 2 else 0.5*(d[mn//2-1]+d[mn//2])
    c = crit(len(x), len(y), Fraction(1,2)*(1-Fraction(conf)))
    return est, d[c], d[mn-1-c], c
print("HL A 95%", hl(*cases["A"], Fraction(95,100)))
print("HL A 98%", hl(*cases["A"], Fraction(98,100)))
print("HL C 90%", hl(*cases["C"], Fraction(90,100)))

for p, df in [(0.99,4),(0.975,4),(0.95,9),(0.99,1),(0.995,30),(0.9,2.5),(0.999,100)]:
    # t quantile via mpmath: solve cdf
    f = lambda t: mp.betainc(df/2.0, 0.5, 0, df/(df+t*t), regularized=True)/2 - (1-p)
    q = mp.findroot(f, 2)
    print("t", p, df, mp.nstr(q, 15))
for p in [0.975, 0.99, 0.999999, 1e-10]:
    print("z", p, mp.nstr(mp.sqrt(2)*mp.erfinv(2*mp.mpf(p)-1), 17))
print("tcdf(2.0, 5)", mp.nstr(1 - mp.betainc(2.5, 0.5, 0, 5/(5+4.0), regularized=True)/2, 17))
# large normal approx critical for 60,60 one-sided 0.01
m=n=60; mu=m*n/2; sd=math.sqrt(m*n*(m+n+1)/12)
z=float(mp.sqrt(2)*mp.erfinv(2*mp.mpf(0.99)-1))
print("crit60", math.floor(mu - z*sd - 0.5))
# prediction interval
xs=[1.0,1.2,0.9,1.1,1.05,0.95]
n=len(xs); mean=sum(xs)/n; s=math.sqrt(sum((v-mean)**2 for v in xs)/(n-1))
f = lambda t: mp.betainc((n-1)/2.0, 0.5, 0, (n-1)/((n-1)+t*t), regularized=True)/2 - 0.025
tq=float(mp.findroot(f, 2))
half=tq*s*math.sqrt(1/n+1/2)
print("PI", mean-half, mean+half, "t", tq)
