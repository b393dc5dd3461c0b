"""Compiled document-at-a-time MaxScore over the three article views (numba; see :mod:`.maxscore`).

Scores are float32 sums added in query order (a repeated term adds again), the fused score the same
float32 operations as :mod:`.articles`, so every value equals the exhaustive one bit for bit.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# A bound prunes only when it misses the bar by more than float32 rounding could hide.
_MARGIN = 1e-4


@njit(cache=True, nogil=True)
def _seek(idx, pos, end, target):
    """First position in [pos, end) whose document is >= target (galloping, then binary search)."""
    if pos >= end or idx[pos] >= target:
        return pos
    lo = pos
    step = 1
    hi = pos + 1
    while hi < end and idx[hi] < target:
        lo = hi
        step *= 2
        hi = lo + step
    if hi > end:
        hi = end
    lo += 1
    while lo < hi:
        mid = (lo + hi) >> 1
        if idx[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def _slots(q):
    """Distinct terms of a query (first-seen order), their multiplicity, and each position's slot."""
    n = len(q)
    distinct = np.empty(n, dtype=np.int64)
    mult = np.zeros(n, dtype=np.int64)
    slot = np.empty(n, dtype=np.int64)
    m = 0
    for i in range(n):
        found = -1
        for j in range(m):
            if distinct[j] == q[i]:
                found = j
                break
        if found < 0:
            distinct[m] = q[i]
            found = m
            m += 1
        mult[found] += 1
        slot[i] = found
    return distinct[:m], mult[:m], slot


@njit(cache=True, nogil=True)
def view_max(data, idx, ptr, tmax, q, chunk_article, use_live, keep, start, allowed):
    """The largest score of a view over its documents (over live chunks when ``use_live``), exact, and
    up to ``keep`` of the best documents scored on the way (seeds for the fused bar). ``allowed`` (one
    byte per article, empty: all) leaves out the articles outside the search's scope.

    Documents in order, a running best (from ``start``: a score some document is known to reach, so
    pruning begins at once); terms whose largest impacts add up to less than the best are only
    searched for, never walked. (Visiting blocks best bound first measured slower here: one
    question's view maxima are found after a few thousand documents.)
    """
    terms, mult, slot = _slots(q)
    m = len(terms)
    ub = np.empty(m, dtype=np.float64)
    for j in range(m):
        ub[j] = mult[j] * np.float64(tmax[terms[j]])
    order = np.argsort(ub)  # ascending bound: the first ones become non-essential first
    prefix = np.zeros(m + 1, dtype=np.float64)
    for r in range(m):
        prefix[r + 1] = prefix[r] + ub[order[r]]
    pos = np.empty(m, dtype=np.int64)
    end = np.empty(m, dtype=np.int64)
    for j in range(m):
        pos[j] = ptr[terms[j]]
        end[j] = ptr[terms[j] + 1]
    best = np.float32(start)
    p = 0  # slots of rank < p are non-essential
    while p < m and prefix[p + 1] * (1 + _MARGIN) < best:
        p += 1
    big = np.iinfo(np.int64).max
    seeds = np.full(max(keep, 1), -1, dtype=np.int64)
    seed_score = np.full(max(keep, 1), np.float32(-1.0), dtype=np.float32)
    while True:
        d = big
        for r in range(p, m):
            j = order[r]
            if pos[j] < end[j] and idx[pos[j]] < d:
                d = idx[pos[j]]
        if d == big:
            break
        bound = prefix[p]
        for r in range(p, m):
            j = order[r]
            if pos[j] < end[j] and idx[pos[j]] == d:
                bound += ub[j]
        if use_live:
            live = d < len(chunk_article) and chunk_article[d] >= 0
            if live and len(allowed):
                live = allowed[chunk_article[d]] != 0
        else:
            live = len(allowed) == 0 or (d < len(allowed) and allowed[d] != 0)
        if live and bound * (1 + _MARGIN) > best:
            s = np.float32(0.0)
            for i in range(len(q)):
                j = slot[i]
                pos[j] = _seek(idx, pos[j], end[j], d)
                if pos[j] < end[j] and idx[pos[j]] == d:
                    s += data[pos[j]]
            if s > seed_score[0]:  # the weakest seed is replaced (kept at position 0)
                seeds[0], seed_score[0] = d, s
                w = 0
                for r in range(1, len(seeds)):
                    if seed_score[r] < seed_score[w]:
                        w = r
                seeds[0], seeds[w] = seeds[w], seeds[0]
                seed_score[0], seed_score[w] = seed_score[w], seed_score[0]
            if s > best:
                best = s
                while p < m and prefix[p + 1] * (1 + _MARGIN) < best:
                    p += 1
        for r in range(p, m):
            j = order[r]
            if pos[j] < end[j] and idx[pos[j]] == d:
                pos[j] += 1
    return best, seeds[seeds >= 0]


@njit(cache=True, nogil=True)
def views_of(c_data, c_idx, c_ptr, a_data, a_idx, a_ptr, h_data, h_idx, h_ptr, first, count, max_count, q, articles):
    """The three view scores (best chunk, article, heading) of each given article, exact."""
    terms, mult, slot = _slots(q)
    m = len(terms)
    chunk = np.zeros(len(articles), dtype=np.float32)
    art = np.zeros(len(articles), dtype=np.float32)
    head = np.zeros(len(articles), dtype=np.float32)
    cs = np.zeros(max(max_count, 1), dtype=np.float32)
    cp, ce = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64)
    ap, ae = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64)
    hp, he = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64)
    for i in range(len(articles)):
        a = articles[i]
        for j in range(m):  # every list searched from its start: the articles come in any order
            t = terms[j]
            cp[j], ce[j] = c_ptr[t], c_ptr[t + 1]
            ap[j], ae[j] = a_ptr[t], a_ptr[t + 1]
            hp[j], he[j] = h_ptr[t], h_ptr[t + 1]
        art[i], head[i], chunk[i] = _score(
            a,
            first[a],
            first[a] + count[a],
            q,
            slot,
            cs,
            c_data,
            c_idx,
            cp,
            ce,
            a_data,
            a_idx,
            ap,
            ae,
            h_data,
            h_idx,
            hp,
            he,
        )
    return chunk, art, head


@njit(cache=True, nogil=True)
def fuse(chunk, art, head, maxima, weights):
    """The fused score of each article from its three view scores (:func:`_fuse`, element by element)."""
    out = np.empty(len(chunk), dtype=np.float32)
    for i in range(len(chunk)):
        out[i] = _fuse(chunk[i], art[i], head[i], maxima, weights)
    return out


@njit(cache=True, nogil=True)
def _fuse(chunk, art, head, maxima, weights):
    """``chunk / M_c + w_a * article / M_a + w_h * heading / M_h`` in float32, as numpy computes it."""
    mc, ma, mh = maxima[0], maxima[1], maxima[2]
    nc = chunk / mc if mc > 0 else chunk
    na = art / ma if ma > 0 else art
    nh = head / mh if mh > 0 else head
    return nc + weights[0] * na + weights[1] * nh


@njit(cache=True, nogil=True)
def _live_next(c_idx, c_pos, c_end, chunk_article):
    """Skip postings of chunks of expired articles; the cursor and the article it points at."""
    n = len(chunk_article)
    while c_pos < c_end and (c_idx[c_pos] >= n or chunk_article[c_idx[c_pos]] < 0):
        c_pos += 1
    if c_pos < c_end:
        return c_pos, chunk_article[c_idx[c_pos]]
    return c_pos, np.iinfo(np.int64).max


@njit(cache=True, nogil=True)
def _block_top(bblock, bmax, cur, end, b):
    """A term's largest impact in block b (0 if it has none there), its entry cursor moved forwards."""
    cur = _seek(bblock, cur, end, b)
    if cur < end and bblock[cur] == b:
        return cur, np.float64(bmax[cur])
    return cur, 0.0


@njit(cache=True, nogil=True)
def _move(j, art, row, c_idx, cp, ce, a_idx, ap, ae, h_idx, hp, he, chunk_article):
    """Slot j's cursors forwards to article ``art`` (chunk row ``row``); the next article they hold."""
    cp[j] = _seek(c_idx, cp[j], ce[j], row)
    cp[j], na = _live_next(c_idx, cp[j], ce[j], chunk_article)
    ap[j] = _seek(a_idx, ap[j], ae[j], art)
    if ap[j] < ae[j] and a_idx[ap[j]] < na:
        na = a_idx[ap[j]]
    hp[j] = _seek(h_idx, hp[j], he[j], art)
    if hp[j] < he[j] and h_idx[hp[j]] < na:
        na = h_idx[hp[j]]
    return na


@njit(cache=True, nogil=True)
def _essential_from(order, bounds, bar):
    """How many of the slots (ascending bound) add up to less than the bar: those are non-essential."""
    total = 0.0
    p = 0
    while p < len(order):
        total += bounds[order[p]]
        if total * (1 + _MARGIN) >= bar:
            break
        p += 1
    return p


@njit(cache=True, nogil=True)
def top_fused(
    c_data, c_idx, c_ptr, c_max, c_bptr, c_bblock, c_bmax,
    a_data, a_idx, a_ptr, a_max, a_bptr, a_bblock, a_bmax,
    h_data, h_idx, h_ptr, h_max, h_bptr, h_bblock, h_bmax,
    block, chunk_article, first, count, max_count, q, k, maxima, weights, floor, allowed,
):  # fmt: skip
    """The top k articles by fused score (ties: the lower article), with their three view scores; only
    articles ``allowed`` (one byte per article; empty: all) are scored.

    ``maxima`` (float32: chunk, article, heading) are the views' exact maxima; ``weights`` (float32)
    the article and heading weights; ``floor`` a fused score at least k articles reach (0 if unknown),
    so that pruning starts before k articles are kept. Returns (articles, fused, chunk, article,
    heading), unordered.

    Articles are visited block by block. A block whose bound (its block maxima, summed over the terms)
    is below the bar is jumped; inside a block, only the articles holding one of the block's
    *essential* terms are visited; an article's bound is tightened term by term with its own impacts
    before it is scored in full.
    """
    terms, mult, slot = _slots(q)
    m = len(terms)
    n_articles = len(first)
    n_blocks = (n_articles + block - 1) // block
    big = np.iinfo(np.int64).max
    mc, ma, mh = np.float64(maxima[0]), np.float64(maxima[1]), np.float64(maxima[2])
    wa, wh = np.float64(weights[0]), np.float64(weights[1])
    # Every block's bound: the block maxima of the query's terms, over the view maxima, weighted.
    block_bound = np.zeros(n_blocks, dtype=np.float64)
    _add_block_bounds(block_bound, terms, mult, c_bptr, c_bblock, c_bmax, mc, 1.0)
    _add_block_bounds(block_bound, terms, mult, a_bptr, a_bblock, a_bmax, ma, wa)
    _add_block_bounds(block_bound, terms, mult, h_bptr, h_bblock, h_bmax, mh, wh)
    cp, ce = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64)
    ap, ae = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64)
    hp, he = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64)
    bc, be = np.empty((3, m), dtype=np.int64), np.empty((3, m), dtype=np.int64)
    nxt = np.empty(m, dtype=np.int64)  # the next article a slot's postings (any view) hold
    for j in range(m):
        t = terms[j]
        cp[j], ce[j] = c_ptr[t], c_ptr[t + 1]
        ap[j], ae[j] = a_ptr[t], a_ptr[t + 1]
        hp[j], he[j] = h_ptr[t], h_ptr[t + 1]
        bc[0, j], be[0, j] = c_bptr[t], c_bptr[t + 1]
        bc[1, j], be[1, j] = a_bptr[t], a_bptr[t + 1]
        bc[2, j], be[2, j] = h_bptr[t], h_bptr[t + 1]
    top_art = np.empty(k, dtype=np.int64)
    top_f = np.empty(k, dtype=np.float32)
    top_c = np.empty(k, dtype=np.float32)
    top_a = np.empty(k, dtype=np.float32)
    top_h = np.empty(k, dtype=np.float32)
    n = 0
    worst = 0  # position of the worst kept article (lowest score, then highest article)
    bar = np.float32(floor)  # no article below it can be in the top k
    gb = np.zeros(m, dtype=np.float64)  # each slot's bound in the current block
    cs = np.zeros(max(max_count, 1), dtype=np.float32)  # the chunk scores of the article being scored
    for b in range(n_blocks):
        if block_bound[b] == 0 or block_bound[b] * (1 + _MARGIN) < bar:
            continue  # no article of this block reaches the bar: its postings are never read
        start = b * block
        nb = min(start + block, n_articles)
        for j in range(m):
            bc[0, j], x = _block_top(c_bblock, c_bmax, bc[0, j], be[0, j], b)
            bc[1, j], y = _block_top(a_bblock, a_bmax, bc[1, j], be[1, j], b)
            bc[2, j], z = _block_top(h_bblock, h_bmax, bc[2, j], be[2, j], b)
            gb[j] = mult[j] * _weighted(x, y, z, mc, ma, mh, wa, wh)
        # The block's essential slots: without them the others stay below the bar.
        local = np.argsort(gb)
        lp = _essential_from(local, gb, bar)
        for r in range(lp, m):
            j = local[r]
            if gb[j] > 0:
                nxt[j] = _move(j, start, first[start], c_idx, cp, ce, a_idx, ap, ae, h_idx, hp, he, chunk_article)
        while True:
            a = big
            for r in range(lp, m):
                j = local[r]
                if gb[j] > 0 and nxt[j] < a:
                    a = nxt[j]
            if a >= nb:
                break
            bound = 0.0
            for r in range(m):
                j = local[r]
                if r < lp or nxt[j] == a:
                    bound += gb[j]
            lo = first[a]
            hi = lo + count[a]
            if len(allowed) and allowed[a] == 0:
                bound = -1.0  # outside the scope: never scored
            if bound * (1 + _MARGIN) >= bar:
                bound = _tighten(
                    bound, bar, a, lo, hi, local, lp, gb, nxt, mult, mc, ma, mh, wa, wh,
                    c_data, c_idx, cp, ce, a_data, a_idx, ap, ae, h_data, h_idx, hp, he,
                )  # fmt: skip
            if bound * (1 + _MARGIN) >= bar:
                art, head, chunk = _score(
                    a, lo, hi, q, slot, cs, c_data, c_idx, cp, ce, a_data, a_idx, ap, ae, h_data, h_idx, hp, he
                )
                fused = _fuse(chunk, art, head, maxima, weights)
                if fused > 0 and fused >= floor and (n < k or fused > bar):
                    n, worst = _keep(n, worst, k, a, fused, chunk, art, head, top_art, top_f, top_c, top_a, top_h)
                    if n == k:
                        bar = max(top_f[worst], np.float32(floor))
                        lp = _essential_from(local, gb, bar)
            for r in range(lp, m):
                j = local[r]
                if gb[j] > 0 and nxt[j] == a:
                    nxt[j] = _move(j, a + 1, hi, c_idx, cp, ce, a_idx, ap, ae, h_idx, hp, he, chunk_article)
    return top_art[:n], top_f[:n], top_c[:n], top_a[:n], top_h[:n]


@njit(cache=True, nogil=True)
def _add_block_bounds(block_bound, terms, mult, bptr, bblock, bmax, maximum, weight):
    """Add one view's block maxima of the query's terms, in fused units, to every block's bound."""
    if maximum <= 0:
        return
    n_blocks = len(block_bound)
    for j in range(len(terms)):
        t = terms[j]
        for e in range(bptr[t], bptr[t + 1]):
            if bblock[e] < n_blocks:  # (a block beyond the articles: a damaged file, ignored)
                block_bound[bblock[e]] += mult[j] * weight * np.float64(bmax[e]) / maximum


@njit(cache=True, nogil=True)
def _tighten(
    bound, bar, a, lo, hi, local, lp, gb, nxt, mult, mc, ma, mh, wa, wh,
    c_data, c_idx, cp, ce, a_data, a_idx, ap, ae, h_data, h_idx, hp, he,
):  # fmt: skip
    """Article a's bound, tightened term by term (largest first): its own impacts in the three views
    replace the block maxima, until it falls below the bar (most do) or every term is known."""
    m = len(local)
    for r in range(m - 1, -1, -1):
        j = local[r]
        if gb[j] == 0 or (r >= lp and nxt[j] != a):
            continue  # no postings in this block, or an essential term the article lacks
        x = 0.0
        cp[j] = _seek(c_idx, cp[j], ce[j], lo)
        at = cp[j]
        while at < ce[j] and c_idx[at] < hi:
            if c_data[at] > x:
                x = np.float64(c_data[at])
            at += 1
        ap[j] = _seek(a_idx, ap[j], ae[j], a)
        y = np.float64(a_data[ap[j]]) if ap[j] < ae[j] and a_idx[ap[j]] == a else 0.0
        hp[j] = _seek(h_idx, hp[j], he[j], a)
        z = np.float64(h_data[hp[j]]) if hp[j] < he[j] and h_idx[hp[j]] == a else 0.0
        bound += mult[j] * _weighted(x, y, z, mc, ma, mh, wa, wh) - gb[j]
        if bound * (1 + _MARGIN) < bar:
            break
    return bound


@njit(cache=True, nogil=True)
def _keep(n, worst, k, a, fused, chunk, art, head, top_art, top_f, top_c, top_a, top_h):
    """Keep article a among the best k (in a free place, or in the worst one's); the new count and the
    position of the worst kept (lowest score, then highest article: the one a later tie cannot beat)."""
    at = n if n < k else worst
    n = min(n + 1, k)
    top_art[at], top_f[at], top_c[at], top_a[at], top_h[at] = a, fused, chunk, art, head
    if n == k:
        worst = 0
        for r in range(1, k):
            if top_f[r] < top_f[worst] or (top_f[r] == top_f[worst] and top_art[r] > top_art[worst]):
                worst = r
    return n, worst


@njit(cache=True, nogil=True)
def _weighted(x, y, z, mc, ma, mh, wa, wh):
    """A term's bound in fused units: its chunk, article and heading impacts over the view maxima."""
    v = 0.0
    if mc > 0:
        v += x / mc
    if ma > 0:
        v += wa * y / ma
    if mh > 0:
        v += wh * z / mh
    return v


@njit(cache=True, nogil=True)
def _score(a, lo, hi, q, slot, cs, c_data, c_idx, cp, ce, a_data, a_idx, ap, ae, h_data, h_idx, hp, he):
    """Article a's three view scores, float32, added in query order (the chunk view: its best chunk)."""
    art = np.float32(0.0)
    head = np.float32(0.0)
    for r in range(hi - lo):
        cs[r] = np.float32(0.0)
    for i in range(len(q)):
        j = slot[i]
        ap[j] = _seek(a_idx, ap[j], ae[j], a)
        if ap[j] < ae[j] and a_idx[ap[j]] == a:
            art += a_data[ap[j]]
        hp[j] = _seek(h_idx, hp[j], he[j], a)
        if hp[j] < he[j] and h_idx[hp[j]] == a:
            head += h_data[hp[j]]
        cp[j] = _seek(c_idx, cp[j], ce[j], lo)
        x = cp[j]
        while x < ce[j] and c_idx[x] < hi:
            cs[c_idx[x] - lo] += c_data[x]
            x += 1
    chunk = np.float32(0.0)
    for r in range(hi - lo):
        if cs[r] > chunk:
            chunk = cs[r]
    return art, head, chunk
