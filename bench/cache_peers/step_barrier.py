"""The step barrier of bench/run_cache.py (data-parallel lock-step), run on the switch host:
argv host port. Trainers connect, say "GROUP N\\n" once, then send a byte at every step; when
N members of GROUP have sent one, each gets a byte back. A member that disconnects leaves the
group (the others are not held up by a dead trainer). Prints "ready" once listening."""
import socket, sys, threading
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], int(sys.argv[2]))); ls.listen(64)
lock = threading.Lock(); groups = {}
def release(g):
    st = groups[g]
    if st["members"] and len(st["waiting"]) >= st["members"]:
        for c in st["waiting"]:
            try: c.sendall(b"k")
            except OSError: pass
        st["waiting"] = []
def serve(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    f = c.makefile("rb")
    g, n = f.readline().split()
    with lock:
        st = groups.setdefault(g, {"members": int(n), "joined": 0, "waiting": []})
        st["joined"] += 1
    try:
        while f.read(1):
            with lock:
                st["waiting"].append(c); release(g)
    finally:
        with lock:
            st["members"] -= 1
            if c in st["waiting"]: st["waiting"].remove(c)
            release(g)
print("ready", flush=True)
while True:
    threading.Thread(target=serve, args=(ls.accept()[0],), daemon=True).start()
