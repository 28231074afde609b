"""next-shrink.patch's loops against main's, on the CPU: the order of a block's work (sends, the counts, receive items,
draws) is the same for 300 000 random settings of the shares (python3 next-shrink-loop-check.py). Each function is a
line-by-line transcription of the kernel loop it names (dispatch_kernel's and combine_kernel's, main 807a210 and the
patch), its calls recorded instead of made; own_placed implies a block that receives and no split (dispatch_kernel)."""

import random


def dispatch_main(p):
    acts, nxt, draw = [], p["send_first"], [p["draw0"]]
    src_items = 0

    def draw_or_end(draws):
        if draws:
            acts.append("draw")
            draw[0] += 1
            return draw[0] - 1
        return src_items

    for step in (0, 1):
        if (step == 0) != p["own_placed"]:
            while nxt < p["groups"] and (nxt == p["send_first"] or p["sends_first"]):
                acts.append(("send", nxt))
                nxt += p["send_stride"]
        elif p["recv_runs"]:
            acts.append("counts")
            src_items = p["items"]
    draws = p["split"] and src_items > p["recv_blocks"]
    u = draw_or_end(draws) if p["split"] and p["recv_first"] >= p["recv_blocks"] else p["recv_first"]
    while u < src_items or nxt < p["groups"]:
        if nxt < p["groups"]:
            acts.append(("send", nxt))
        if u < src_items:
            acts.append(("receive", u))
        u = draw_or_end(draws) if p["split"] else u + p["recv_stride"]
        nxt += p["send_stride"]
    return acts


def dispatch_patch(p):
    acts, nxt, draw = [], p["send_first"], [p["draw0"]]
    src_items, draws, counted, by_turns, u = 0, False, False, False, 0

    def draw_or_end():
        if draws:
            acts.append("draw")
            draw[0] += 1
            return draw[0] - 1
        return src_items

    while True:
        early_send = nxt < p["groups"] and (nxt == p["send_first"] or p["sends_first"])
        send_now = nxt < p["groups"] if by_turns else early_send and counted == p["own_placed"]
        if send_now:
            acts.append(("send", nxt))
            nxt += p["send_stride"]
            if not by_turns:
                continue
        elif not counted:
            counted = True
            if p["recv_runs"]:
                acts.append("counts")
                src_items = p["items"]
            continue
        elif not by_turns:
            by_turns = True
            draws = p["split"] and src_items > p["recv_blocks"]
            u = draw_or_end() if p["split"] and p["recv_first"] >= p["recv_blocks"] else p["recv_first"]
            if u >= src_items and nxt >= p["groups"]:
                break
            continue
        if u < src_items:
            acts.append(("receive", u))
        u = draw_or_end() if p["split"] else u + p["recv_stride"]
        if u >= src_items and nxt >= p["groups"]:
            break
    return acts


def combine_main(p):
    acts, nxt = [], p["send_first"]
    while nxt < p["groups"] and (nxt == p["send_first"] or p["sends_first"]):
        acts.append(("send", nxt))
        nxt += p["send_stride"]
    u = p["recv_first"]
    while u < p["items"] or nxt < p["groups"]:
        if nxt < p["groups"]:
            acts.append(("send", nxt))
        if u < p["items"]:
            acts.append(("receive", u))
        u += p["recv_stride"]
        nxt += p["send_stride"]
    return acts


def combine_patch(p):
    acts, nxt, u, by_turns = [], p["send_first"], p["recv_first"], False
    while True:
        if nxt < p["groups"] and (by_turns or nxt == p["send_first"] or p["sends_first"]):
            acts.append(("send", nxt))
            nxt += p["send_stride"]
            if not by_turns:
                continue
        elif not by_turns:
            by_turns = True
            continue
        if u < p["items"]:
            acts.append(("receive", u))
        elif nxt >= p["groups"]:
            break
        u += p["recv_stride"]
    return acts


def setting(rng):
    p = dict(
        groups=rng.randint(0, 12),
        send_first=rng.randint(0, 14),
        send_stride=rng.randint(1, 4),
        sends_first=rng.random() < 0.5,
        own_placed=rng.random() < 0.3,
        recv_runs=rng.random() < 0.8,
        items=rng.randint(0, 15),
        split=rng.random() < 0.5,
        recv_blocks=rng.randint(1, 6),
        recv_first=rng.randint(0, 8),
        recv_stride=rng.randint(1, 4),
        draw0=rng.randint(0, 20),
    )
    if p["own_placed"]:
        p["recv_runs"], p["split"] = True, False
    return p


if __name__ == "__main__":
    rng = random.Random(26)
    for i in range(300_000):
        p = setting(rng)
        assert dispatch_main(p) == dispatch_patch(p), (p, dispatch_main(p), dispatch_patch(p))
        assert combine_main(p) == combine_patch(p), (p, combine_main(p), combine_patch(p))
    print("the same order of work in 300000 settings, dispatch and combine")
