"""Prints a base port whose next 256 ports are all free here: a port range for
the runs of one scaling sweep (experiments/sim_cluster.sh runs it in host 0's
network namespace, where only the sweep's runs use ports). Below the ephemeral
range, where Gloo's own connections live. Prints nothing when 100 random tries
found no such range.

    sim_cluster_free_ports.py
"""
import random
import socket

TRIES = 100
# As many ports as the sweep's runs may take.
PORTS = 256


def main():
    for _ in range(TRIES):
        base = random.randrange(20000, 32000 - PORTS)
        held = []
        try:
            for port in range(base, base + PORTS):
                s = socket.socket()
                held.append(s)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("0.0.0.0", port))
            print(base)
            break
        except OSError:
            pass
        finally:
            for s in held:
                s.close()


if __name__ == "__main__":
    main()
