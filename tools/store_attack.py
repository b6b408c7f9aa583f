#!/usr/bin/env python3
"""Attacks a real training job's store as a stranger would, and reports what it cost rank 0.

Starts `train` on synthetic data with two ranks and a store token, then, from outside the job:
twelve connections that each announce a 64 MiB hello and send as much of it as the server takes,
then 4,200 connections that never say anything. Prints rank 0's resident memory before and after
(and its peak), how many of the idle connections the server still holds, and whether the job is
alive. docs/RELIABILITY.md gives the numbers before and after the server's limits.

    bazel build //trainer:train && tools/store_attack.py bazel-bin/trainer/train
"""
import argparse
import os
import re
import signal
import socket
import struct
import subprocess
import time


def listener_pid(port):
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True,
                         text=True).stdout
    m = re.search(r"pid=(\d+)", out)
    return int(m.group(1)) if m else None


def memory_mb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) // 1024
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("train", help="the train binary")
    parser.add_argument("--port", type=int, default=29731, help="the job's master port")
    parser.add_argument("--idle", type=int, default=4200, help="idle connections to open")
    args = parser.parse_args()
    env = dict(os.environ, DTRAIN_STORE_TOKEN="job-secret", OMP_NUM_THREADS="1")
    with open(f"/tmp/store_attack_{args.port}.log", "w") as log:
        job = subprocess.Popen(
            [args.train, "--dataset=synthetic", "--model=convnet", "--nproc_per_node=2",
             f"--master_port={args.port}", "--epochs=1000"],
            env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        pid = None
        for _ in range(600):
            pid = listener_pid(args.port)
            if pid:
                break
            time.sleep(0.1)
        if pid is None:
            raise SystemExit(f"nothing listens on port {args.port}: see /tmp/store_attack_{args.port}.log")
        time.sleep(8)  # Past the rendezvous: the job trains.
        print(f"rank 0 (pid {pid}) before: {memory_mb(pid, 'VmRSS')} MB resident")

        header = struct.pack("<IBBHI", 0x5653544B, 2, 1, 0, 64 << 20)
        big = []
        for _ in range(12):
            s = socket.create_connection(("127.0.0.1", args.port))
            s.setblocking(False)
            s.send(header)
            big.append(s)
        chunk = b"x" * (1 << 20)
        sent = [0] * len(big)
        start = time.time()
        while time.time() - start < 10:
            progress = False
            for i, s in enumerate(big):
                if s is None or sent[i] >= 64 << 20:
                    continue
                try:
                    sent[i] += s.send(chunk)
                    progress = True
                except BlockingIOError:
                    pass
                except OSError:
                    big[i] = None  # Closed by the server.
            if not progress:
                time.sleep(0.05)
        print(f"12 x 64 MiB hellos: the server took {sum(sent) >> 20} MB and closed "
              f"{sum(s is None for s in big)} of the 12 connections; rank 0 now "
              f"{memory_mb(pid, 'VmRSS')} MB resident, peak {memory_mb(pid, 'VmHWM')} MB")

        idle = []
        for i in range(args.idle):
            try:
                idle.append(socket.create_connection(("127.0.0.1", args.port), timeout=5))
            except OSError as e:
                print(f"idle connection {i} failed: {e}")
                break
        time.sleep(3)
        held = 0
        for s in idle:
            s.setblocking(False)
            try:
                s.recv(1)  # Bytes (a goodbye) or b"" (closed): not held.
            except BlockingIOError:
                held += 1
            except OSError:
                pass
        print(f"{len(idle)} idle connections: {held} still held by the server after 3 s")
        alive = job.poll() is None
        print(f"job alive: {alive}" +
              (f", rank 0 holds {len(os.listdir(f'/proc/{pid}/fd'))} descriptors" if alive else ""))
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGTERM)
        job.wait(timeout=60)


if __name__ == "__main__":
    main()
