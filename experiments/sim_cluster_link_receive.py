"""The receiving end of experiments/sim_cluster.sh's link check (run in host
0's namespace): listens on ADDRESS at a free port, writes the port to PORT_FILE
(whole: written beside it, then renamed), accepts one TCP stream (20 s at
most) and reads it to its end, then prints what arrived as one line:

    0.953 Gbit/s: 119209984 bytes in 1.001 s, one TCP stream host 1 -> host 0

    sim_cluster_link_receive.py ADDRESS PORT_FILE
"""
import os
import socket
import sys
import time


def main(argv):
    address, port_file = argv
    server = socket.socket()
    server.bind((address, 0))
    server.listen(1)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)
    server.settimeout(20)
    connection, _ = server.accept()
    connection.settimeout(20)
    received, start = 0, None
    while True:
        chunk = connection.recv(1 << 20)
        if not chunk:
            break
        if start is None:  # from the first bytes: the connection set up
            start = time.monotonic()
        received += len(chunk)
    seconds = time.monotonic() - start
    print("%.3f Gbit/s: %d bytes in %.3f s, one TCP stream host 1 -> host 0"
          % (received * 8 / seconds / 1e9, received, seconds))


if __name__ == "__main__":
    main(sys.argv[1:])
