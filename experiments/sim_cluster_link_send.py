"""The sending end of experiments/sim_cluster.sh's link check (run in host
1's namespace): one TCP stream to ADDRESS:PORT (sim_cluster_link_receive.py),
1 MiB writes for SECONDS, then closed.

    sim_cluster_link_send.py ADDRESS PORT SECONDS
"""
import socket
import sys
import time


def main(argv):
    address, port, seconds = argv
    connection = socket.create_connection((address, int(port)), timeout=20)
    buf, end = b"\0" * (1 << 20), time.monotonic() + float(seconds)
    while time.monotonic() < end:
        connection.sendall(buf)
    connection.close()


if __name__ == "__main__":
    main(sys.argv[1:])
