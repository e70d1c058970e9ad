"""One TCP stream between two emulated nodes: what a shaped link sustains (no iperf3 here).

    ip netns exec zc-node1 python linktest.py serve 198.18.0.2 &
    ip netns exec zc-node0 python linktest.py send 198.18.0.2 --mib 512

`send` prints the goodput (payload bytes / time until the receiver has them all).
"""

import argparse
import socket
import time

PORT = 5201
CHUNK = 1 << 20


def serve(addr: str) -> None:
    """Accept one connection, read until EOF, answer with the byte count (timing is end to end)."""
    with socket.create_server((addr, PORT), reuse_port=True) as srv:
        conn, _ = srv.accept()
        with conn:
            total = 0
            while data := conn.recv(CHUNK):   # until the sender's SHUT_WR
                total += len(data)
            conn.sendall(str(total).encode())


def send(addr: str, mib: int) -> float:
    """Send `mib` MiB, wait for the receiver's count; returns goodput in Gbit/s."""
    payload = bytes(CHUNK)
    for _ in range(50):                          # the server may still be starting
        try:
            sock = socket.create_connection((addr, PORT))
            break
        except ConnectionRefusedError:
            time.sleep(0.1)
    with sock:
        t0 = time.perf_counter()
        for _ in range(mib):
            sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        got = int(sock.recv(64))
        dt = time.perf_counter() - t0
    assert got == mib * CHUNK, (got, mib * CHUNK)
    return got * 8 / dt / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["serve", "send"])
    ap.add_argument("addr")
    ap.add_argument("--mib", type=int, default=256)
    args = ap.parse_args()
    if args.mode == "serve":
        serve(args.addr)
    else:
        gbps = send(args.addr, args.mib)
        print(f"{args.mib} MiB in one TCP stream: {gbps:.3f} Gbit/s goodput")


if __name__ == "__main__":
    main()
