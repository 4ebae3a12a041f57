"""The stoker trainer of bench/run_cache.py's (a) and (c): one rank, --epochs epochs through
stoker.Loader; argv: uri rank world epochs seed limit barrier every budget_mb step
[train_rate compute].

Prints {"ready"} once the loader is open, progress lines every `every` s, {"epoch_done"} after
each epoch. barrier "epoch": it waits for a "go" line on stdin before every epoch; "start":
before the first one only; "none": never. A "stop" line on stdin ends it at the next sample.
train_rate R > 0 emulates a GPU-bound step: after every `compute` samples (the step) it sleeps
compute / R s before the step barrier, while stoker.Loader's C++ read pipeline keeps reading
ahead (up to its memory budget); 0: no compute (unthrottled)."""
import json, os, sys, threading, time
import stoker
uri, rank, world, epochs, seed, limit, barrier, every, budget_mb, step = sys.argv[1:11]
train_rate, compute = (float(sys.argv[11]), int(sys.argv[12])) if len(sys.argv) > 12 else (0.0, 0)
rank, world, epochs, seed, limit = int(rank), int(world), int(epochs), int(seed), int(limit)
every, budget = float(every), (int(budget_mb) << 20) or None
block = os.environ.get("STOKER_BENCH_BLOCK_SIZE", "auto")  # the loader's default: auto
loader = stoker.Loader(uri, shuffle="chunk", seed=seed, rank=rank, world_size=world,
                       memory_budget=budget, block_size=None if block == "auto" else int(block))
sync = None
if step:  # "HOST:PORT:GROUP:EVERY": lock-step with the other ranks every EVERY samples
    import socket
    h, p, group, step = step.split(":"); step = int(step)
    sync = socket.create_connection((h, int(p)))
    sync.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sync.sendall(f"{group} {world}\n".encode())
def barrier_step():
    sync.sendall(b"s")
    if sync.recv(1) != b"k":
        raise RuntimeError("step barrier lost")
def gpu(samples):  # the emulated compute of a step of `samples` samples
    if train_rate > 0 and samples:
        time.sleep(samples / train_rate)
state = {"epoch": 0, "samples": 0, "bytes": 0, "stop": False, "stop_asked": False}
out_lock = threading.Lock()
def emit(msg):  # one whole line at a time (print() writes the text and the newline apart)
    with out_lock:
        sys.stdout.write(json.dumps(msg) + "\n"); sys.stdout.flush()
go = threading.Semaphore(0)
def control():
    for line in sys.stdin:
        if line.strip() == "stop":
            state["stop_asked"] = True
        go.release()
    state["stop_asked"] = True
    go.release()
threading.Thread(target=control, daemon=True).start()
def ticker():
    while not state["stop"]:
        emit({"t": time.time(), "epoch": state["epoch"], "samples": state["samples"],
                          "bytes": state["bytes"]})
        time.sleep(every)
emit({"ready": True})
threading.Thread(target=ticker, daemon=True).start()
ok = True
for epoch in range(epochs):
    if barrier == "epoch" or (barrier == "start" and epoch == 0):
        go.acquire()
    if state["stop_asked"]:
        break
    state["epoch"] = epoch
    loader.set_epoch(epoch)
    expected = len(loader) if not limit else min(limit, len(loader))
    t0 = time.time(); n = b = 0; error = None; first = None; stopped = False
    try:
        for data, label, path in loader:
            if state["stop_asked"]:
                stopped = True
                break
            if first is None:
                first = time.time() - t0
            n += 1; b += len(data)
            state["samples"] += 1; state["bytes"] += len(data)
            if compute and n % compute == 0:
                gpu(compute)
            if sync is not None and n % step == 0:
                barrier_step()
            if limit and n >= limit:
                break
    except Exception as e:
        error = repr(e); ok = False
    if compute and not (error or stopped):
        gpu(n % compute)  # the epoch's last, partial step
    t1 = time.time()
    emit({"epoch_done": epoch, "samples": n, "bytes": b,
                      "failed": 0 if stopped else expected - n, "stopped": stopped,
                      "start": t0, "end": t1, "seconds": t1 - t0, "first_sample_s": first,
                      "error": error, "stats": loader.stats()})
    if error or stopped:
        break
    if sync is not None and n % step:
        barrier_step()  # the epoch's last, partial step
state["stop"] = True
emit({"done": True, "ok": ok})
