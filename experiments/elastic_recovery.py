#!/usr/bin/env python3
"""How long an elastic run takes to train again after losing a rank.

Starts `train --elastic` on N ranks, kills (SIGKILL) or stops (SIGSTOP) one of
them once training runs, and times, from that signal, when each survivor saw
the failure, when the next generation was formed and when its first step was
done (the lines TrainElastic writes; each line is stamped when it appears in
the rank's log, polled every few milliseconds). Repeats, then prints one row
per repeat and the median and worst, and writes them to a CSV. The survivors
must finish the run (exit 0). A stopped rank is killed once they went on, or
with --after_stop=CONT let go on, when it must find itself left out and exit
with an error saying so.

With --launchers=torchrun (or elastic,torchrun, taking turns), the same failure for comparison: PyTorch's torchrun
(Debian's python3-torch) runs `train` without --elastic, with --max_restarts=1
and a checkpoint every --checkpoint_every_steps steps; it restarts every
worker, which resume from the newest checkpoint. The time is to the restarted
group's first step, and the steps lost are those trained since that
checkpoint. Both modes log every step (--log_jsonl), which gives the steps
lost: the last step logged before the signal minus the step training went on
from.

On one host, the ranks run on loopback. Under `sim_cluster --run` (the
simulated cluster's hosts, SIM_CLUSTER_NAMESPACES and SIM_CLUSTER_ADDRESSES)
they are spread over the hosts, consecutive ranks on a host, each host one
PID namespace as sim_cluster's hosts are (docs/RELIABILITY.md).

Exit status: 0 when every repeat recovered, 1 when one did not (the reason and
the ranks' last lines are printed), 2 on bad flags.
"""

import argparse
import csv
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import json
import time

DEFAULT_TRAIN_FLAGS = [
    "--epochs=1", "--max_steps=300", "--skip_validation", "--progress=none",
    "--timeout=20s"
]
FAILED = re.compile(r"elastic: generation 0 of \d+ ranks failed")
FORMED = re.compile(r"elastic: generation 1: rank \d+ of \d+, going on from step (\d+)")
FIRST = re.compile(r"elastic: generation 1 trained step (\d+), its first")
LEFT_OUT = re.compile(r"was left out of generation 1")
REGROUP = re.compile(r"elastic: generation 0 of \d+ ranks stopped to admit joiners")
JOINED = re.compile(r"elastic: joined generation 1 as rank \d+ of \d+, going on from step (\d+)")
JOINER_FIRST = re.compile(r"elastic: trained step \d+, its first, .* after it queued to join")
RESUMED = re.compile(r"resumed from .*, step (\d+)")
POLL_SECONDS = 0.003


def steps_logged(path):
  """(unix time, step) of each step line in a --log_jsonl file."""
  out = []
  try:
    with open(path) as f:
      for line in f:
        try:
          entry = json.loads(line)
        except ValueError:
          continue
        if entry.get("event") == "step":
          out.append((float(entry["time"]), int(entry["step"])))
  except FileNotFoundError:
    pass
  return out


def last_step_before(steps, when):
  before = [step for t, step in steps if t < when]
  return max(before) if before else 0


def find_runfile(*parts):
  """A file of the build: from the runfiles, or the source tree beside this script."""
  here = os.path.dirname(os.path.abspath(__file__))
  roots = [os.environ.get("RUNFILES_DIR", ""), os.path.abspath(__file__) + ".runfiles",
           os.path.dirname(os.path.dirname(here))]
  for root in roots:
    for ws in ("dtrain", "_main"):
      path = os.path.join(root, ws, *parts)
      if root and os.path.exists(path):
        return path
  path = os.path.join(os.path.dirname(here), *parts)
  return path if os.path.exists(path) else None


def free_port(namespace):
  code = ("import socket; s = socket.socket(); s.bind(('', 0)); "
          "print(s.getsockname()[1])")
  if namespace is None:
    return int(subprocess.check_output([sys.executable, "-c", code]))
  return int(subprocess.check_output(["ip", "netns", "exec", namespace, sys.executable, "-c", code]))


class Log:
  """A rank's output file, read as it grows; each whole line stamped."""

  def __init__(self, path):
    self.path = path
    self.offset = 0
    self.partial = b""
    self.lines = []  # (time, text)

  def poll(self, now):
    try:
      with open(self.path, "rb") as f:
        f.seek(self.offset)
        data = f.read()
    except FileNotFoundError:
      return
    self.offset += len(data)
    data = self.partial + data
    *whole, self.partial = data.split(b"\n")
    for line in whole:
      self.lines.append((now, line.decode("utf-8", "replace")))

  def first(self, pattern):
    for stamp, text in self.lines:
      m = pattern.search(text)
      if m:
        return stamp, m
    return None, None

  def tail(self, n=6):
    return "\n".join("    " + t for _, t in self.lines[-n:])


def rank_pid(rank, port):
  """The process of `rank` in the job on `port`, found by its command line."""
  want = [f"--rank={rank}".encode(), f":{port}".encode()]
  for entry in os.listdir("/proc"):
    if not entry.isdigit():
      continue
    try:
      with open(f"/proc/{entry}/cmdline", "rb") as f:
        args = f.read().split(b"\0")
    except OSError:
      continue
    if not args or not args[0].endswith(b"/train"):
      continue
    if want[0] in args and any(want[1] in a for a in args):
      return int(entry)
  return None


class Job:
  """N ranks of `train --elastic`, on loopback or on the simulated hosts."""

  def __init__(self, args, train_flags, run_dir, hosts):
    self.ranks = args.ranks
    self.run_dir = run_dir
    self.hosts = hosts
    # --joiner_host=own keeps the last host for the joiner alone.
    self.rank_hosts = hosts[:-1] if args.join and args.joiner_host == "own" else hosts
    namespace = hosts[0][0] if hosts else None
    self.port = free_port(namespace)
    master = hosts[0][1] if hosts else "127.0.0.1"
    self.logs = [Log(os.path.join(run_dir, f"rank{r}.log")) for r in range(self.ranks)]
    self.procs = []
    self.joiner_command = [
        args.train, f"--dist_url=tcp://{master}:{self.port}", "--elastic", "--join"
    ] + train_flags

    def command(r):
      return [args.train, f"--dist_url=tcp://{master}:{self.port}", f"--world_size={self.ranks}",
              f"--rank={r}", "--elastic"] + train_flags

    if not hosts:
      for r in range(self.ranks):
        with open(self.logs[r].path, "wb") as out:
          self.procs.append(
              subprocess.Popen(command(r), stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True))
      return
    per_host = self.ranks // len(self.rank_hosts)
    for k, (ns, _) in enumerate(self.rank_hosts):
      lines = []
      for r in range(k * per_host, (k + 1) * per_host):
        log = shlex.quote(self.logs[r].path)
        rc = shlex.quote(os.path.join(run_dir, f"rank{r}.rc"))
        lines.append(f"({shlex.join(command(r))} >{log} 2>&1; echo $? >{rc}) &")
      lines.append("wait")
      host_log = open(os.path.join(run_dir, f"host{k}.log"), "wb")
      self.procs.append(
          subprocess.Popen([
              "ip", "netns", "exec", ns, "unshare", "--pid", "--fork", "--kill-child",
              "--mount-proc", "env", "GLOO_SOCKET_IFNAME=eth0", "bash", "-c", "\n".join(lines)
          ],
                           stdout=host_log,
                           stderr=subprocess.STDOUT,
                           start_new_session=True))
      host_log.close()

  def start_joiner(self):
    """A process that joins the job; its log and exit code are index `ranks`."""
    n = len(self.logs)
    log = Log(os.path.join(self.run_dir, f"rank{n}.log"))
    self.logs.append(log)
    if not self.hosts:
      with open(log.path, "wb") as out:
        self.procs.append(
            subprocess.Popen(self.joiner_command, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True))
      self.joiner = self.procs[-1]
      return
    # On the last host's network, in a PID namespace of its own: a new machine there
    # (alone there with --joiner_host=own).
    rc = shlex.quote(os.path.join(self.run_dir, f"rank{n}.rc"))
    script = f"{shlex.join(self.joiner_command)} >{shlex.quote(log.path)} 2>&1; echo $? >{rc}"
    self.procs.append(
        subprocess.Popen([
            "ip", "netns", "exec", self.hosts[-1][0], "unshare", "--pid", "--fork",
            "--kill-child", "--mount-proc", "env", "GLOO_SOCKET_IFNAME=eth0", "bash", "-c", script
        ],
                         start_new_session=True))
    self.joiner = self.procs[-1]

  def pid(self, rank):
    if not self.hosts:
      return self.procs[rank].pid
    return rank_pid(rank, self.port)

  def poll(self):
    now = time.time()
    for log in self.logs:
      log.poll(now)

  def running(self):
    return any(p.poll() is None for p in self.procs)

  def exit_code(self, rank):
    if not self.hosts:
      return (self.joiner if rank == self.ranks else self.procs[rank]).poll()
    try:
      with open(os.path.join(self.run_dir, f"rank{rank}.rc")) as f:
        return int(f.read().strip())
    except (OSError, ValueError):
      return None

  def stop(self):
    for p in self.procs:
      if p.poll() is None:
        try:
          os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
          pass
    for p in self.procs:
      p.wait()


def one_repeat(args, train_flags, run_dir, hosts):
  """One kill; returns a row of seconds, or raises RuntimeError saying why."""
  shutil.rmtree(run_dir, ignore_errors=True)
  os.makedirs(run_dir)
  job = Job(args, train_flags, run_dir, hosts)
  survivors = [r for r in range(args.ranks) if r != args.kill or args.join]
  try:
    deadline = time.time() + args.timeout
    began = None
    while began is None:
      job.poll()
      began, _ = job.logs[0].first(re.compile("Begin training"))
      if time.time() > deadline or not job.running():
        raise RuntimeError("training never began")
      time.sleep(POLL_SECONDS)
    while time.time() < began + args.kill_after:
      job.poll()
      time.sleep(POLL_SECONDS)
    if args.join:
      killed_at = time.time()
      job.start_joiner()
    else:
      pid = job.pid(args.kill)
      if pid is None:
        raise RuntimeError(f"rank {args.kill}'s process not found")
      signal_number = signal.SIGKILL if args.signal == "KILL" else signal.SIGSTOP
      killed_at = time.time()
      os.kill(pid, signal_number)
    while True:
      job.poll()
      if all(job.logs[r].first(FIRST)[0] is not None for r in survivors) and (
          not args.join or job.logs[args.ranks].first(JOINER_FIRST)[0] is not None):
        break
      if time.time() > killed_at + args.timeout:
        raise RuntimeError(f"the survivors did not train again within {args.timeout} s")
      if not job.running():
        raise RuntimeError("the job ended before every survivor trained again")
      time.sleep(POLL_SECONDS)
    if args.signal == "STOP" and not args.join:
      os.kill(pid, signal.SIGKILL if args.after_stop == "KILL" else signal.SIGCONT)
    while job.running() and time.time() < killed_at + args.timeout:
      job.poll()
      time.sleep(0.05)
    job.poll()
    for r in survivors + ([args.ranks] if args.join else []):
      code = job.exit_code(r)
      if code != 0:
        raise RuntimeError(f"rank {r if r < args.ranks else 'joining'} exited {code}")
    if args.signal == "STOP" and args.after_stop == "CONT":
      code = job.exit_code(args.kill)
      if code in (0, None) or job.logs[args.kill].first(LEFT_OUT)[0] is None:
        raise RuntimeError(f"rank {args.kill}, let go on after the others left it behind, "
                           f"exited {code} without saying it was left out")
    row = {"signal": "JOIN" if args.join else args.signal, "ranks": args.ranks,
           "killed": "" if args.join else args.kill}
    if args.join:
      joiner = job.logs[args.ranks]
      row["joined_s"] = joiner.first(JOINED)[0] - killed_at
      row["joiner_first_step_s"] = joiner.first(JOINER_FIRST)[0] - killed_at
    for name, pattern in (("failure_seen_s", REGROUP if args.join else FAILED),
                          ("generation_formed_s", FORMED), ("first_step_s", FIRST)):
      stamps = [job.logs[r].first(pattern)[0] for r in survivors]
      if any(s is None for s in stamps):
        raise RuntimeError(f"a survivor wrote no line for {name}")
      row[name] = max(stamps) - killed_at
    _, formed = job.logs[survivors[0]].first(FORMED)
    row["went_on_from_step"] = int(formed.group(1))
    before = last_step_before(steps_logged(os.path.join(run_dir, "steps.jsonl")), killed_at)
    row["steps_lost"] = max(0, before - row["went_on_from_step"])
    return row
  except RuntimeError as e:
    job.poll()
    lines = "\n".join(f"  rank {r}:\n{job.logs[r].tail()}" for r in range(len(job.logs)))
    raise RuntimeError(f"{e}\n{lines}") from None
  finally:
    job.stop()
    job.poll()
    # Each line with the moment it appeared, for looking at the phases.
    for log in job.logs:
      with open(log.path + ".stamped", "w") as f:
        for stamp, text in log.lines:
          f.write(f"{stamp:.3f} {text}\n")


def torchrun_children(agent_pid):
  """The agent's worker processes, by their RANK."""
  out = {}
  try:
    with open(f"/proc/{agent_pid}/task/{agent_pid}/children") as f:
      children = [int(c) for c in f.read().split()]
  except OSError:
    return out
  for pid in children:
    try:
      with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
      continue
    if b"RANK" in env:
      out[int(env[b"RANK"])] = pid
  return out


def one_torchrun_repeat(args, train_flags, run_dir):
  """The same failure under torchrun's restart; a row as one_repeat's."""
  shutil.rmtree(run_dir, ignore_errors=True)
  os.makedirs(run_dir)
  log = Log(os.path.join(run_dir, "torchrun.log"))
  jsonl = os.path.join(run_dir, "steps.jsonl")
  command = [
      "/usr/bin/python3", args.torchrun, f"--nproc_per_node={args.ranks}",
      f"--master_port={free_port(None)}", "--max_restarts=1"
  ] + ([f"--monitor_interval={args.monitor_interval}"] if args.monitor_interval else []) + [
      "--no_python", args.train
  ] + train_flags + [
      f"--checkpoint_dir={os.path.join(run_dir, 'checkpoints')}",
      f"--checkpoint_every_steps={args.checkpoint_every_steps}", "--resume"
  ]
  with open(log.path, "wb") as out:
    agent = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
  try:
    deadline = time.time() + args.timeout
    began = None
    while began is None:
      log.poll(time.time())
      began, _ = log.first(re.compile("Begin training"))
      if time.time() > deadline or agent.poll() is not None:
        raise RuntimeError("training never began")
      time.sleep(POLL_SECONDS)
    time.sleep(max(0.0, began + args.kill_after - time.time()))
    pid = torchrun_children(agent.pid).get(args.kill)
    if pid is None:
      raise RuntimeError(f"no worker with RANK={args.kill} among torchrun's children")
    killed_at = time.time()
    os.kill(pid, signal.SIGKILL if args.signal == "KILL" else signal.SIGSTOP)
    try:
      agent.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
      raise RuntimeError(f"torchrun did not finish within {args.timeout} s of the signal") from None
    log.poll(time.time())
    if agent.returncode != 0:
      raise RuntimeError(f"torchrun exited {agent.returncode}")
    _, resumed = log.first(RESUMED)
    if resumed is not None:
      went_on_from = int(resumed.group(1))
    elif len([1 for _, text in log.lines if "no checkpoint in" in text]) >= 2:
      went_on_from = 0  # Killed before the first checkpoint: from the beginning.
    else:
      raise RuntimeError("the restarted group neither resumed nor started again")
    steps = steps_logged(jsonl)
    after = [t for t, step in steps if t > killed_at and step == went_on_from + 1]
    if not after:
      raise RuntimeError(f"no step {went_on_from + 1} logged after the signal")
    before = last_step_before(steps, killed_at)
    return {
        "signal": args.signal, "ranks": args.ranks, "killed": args.kill,
        "first_step_s": after[0] - killed_at, "went_on_from_step": went_on_from,
        "steps_lost": max(0, before - went_on_from)
    }
  except RuntimeError as e:
    log.poll(time.time())
    raise RuntimeError(f"{e}\n{log.tail(12)}") from None
  finally:
    if agent.poll() is None:
      os.killpg(agent.pid, signal.SIGKILL)
      agent.wait()


def main():
  parser = argparse.ArgumentParser(
      description=__doc__.split("\n\n")[0],
      usage="elastic_recovery [OPTIONS] [-- TRAIN_FLAGS...]",
      epilog="TRAIN_FLAGS go to every rank after the defaults (" + " ".join(DEFAULT_TRAIN_FLAGS) +
      "), so they override them.")
  parser.add_argument("--train", help="the train binary (default: from the runfiles)")
  parser.add_argument("--launchers", default="elastic",
                      help="elastic (train --elastic), torchrun (its restart, for comparison), or "
                      "both, comma-separated: they take turns in each repeat")
  parser.add_argument("--checkpoint_every_steps", type=int, default=10,
                      help="with torchrun: the checkpoints it restarts from")
  parser.add_argument("--monitor_interval", type=float, default=None,
                      help="with torchrun: its agent's --monitor_interval in seconds (default: "
                      "torchrun's own: 5 s in PyTorch 1.13, 0.1 s since pytorch#124692)")
  parser.add_argument("--ranks", type=int, default=4)
  parser.add_argument("--kill", type=int, default=1, help="the rank to signal")
  parser.add_argument("--signal", choices=["KILL", "STOP"], default="KILL")
  parser.add_argument("--join", action="store_true",
                      help="instead of a signal, start a process that joins the job (train "
                      "--elastic --join); times are from its start")
  parser.add_argument("--joiner_host", choices=["last", "own"], default="last",
                      help="on the simulated cluster, where the joiner runs: on the last host "
                      "beside its ranks, or alone on the last host (the ranks spread over the "
                      "others), so that the state it receives crosses a link")
  parser.add_argument("--after_stop", choices=["KILL", "CONT"], default="KILL",
                      help="with --signal=STOP, what the stopped rank gets once the others went on")
  parser.add_argument("--kill_after", type=float, default=1.5,
                      help="seconds after rank 0 began training")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--timeout", type=float, default=120,
                      help="seconds each phase of a repeat may take")
  parser.add_argument("--output_dir", default="elastic_recovery_results",
                      help="the ranks' logs and elastic_recovery.csv")
  argv = sys.argv[1:]
  train_flags = []
  if "--" in argv:
    train_flags = argv[argv.index("--") + 1:]
    argv = argv[:argv.index("--")]
  args = parser.parse_args(argv)
  if args.ranks < 2 or not 0 <= args.kill < args.ranks:
    parser.error(f"--kill={args.kill} must name one of --ranks={args.ranks} (2 or more)")
  if args.repeats < 1:
    parser.error("--repeats must be at least 1")
  args.train = args.train or find_runfile("trainer", "train")
  if not args.train or not os.access(args.train, os.X_OK):
    parser.error("cannot find the train binary: run through 'bazel run "
                 "//experiments:elastic_recovery', or give --train")
  args.train = os.path.abspath(args.train)
  args.launchers = args.launchers.split(",")
  if not args.launchers or any(l not in ("elastic", "torchrun") for l in args.launchers):
    parser.error(f"--launchers: '{','.join(args.launchers)}' is not a list of elastic, torchrun")
  if "torchrun" in args.launchers:
    # Debian's torchrun with the workarounds its PyTorch needs.
    args.torchrun = find_runfile("tools", "launch", "torchrun.py")
    if args.torchrun is None:
      parser.error("cannot find tools/launch/torchrun.py: run through 'bazel run "
                   "//experiments:elastic_recovery'")
    if subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed.run"],
                      stderr=subprocess.DEVNULL).returncode != 0:
      parser.error("--launcher=torchrun needs Debian's python3-torch (tools/setup.sh installs it)")
  hosts = []
  if os.environ.get("SIM_CLUSTER_NAMESPACES"):
    if "torchrun" in args.launchers:
      parser.error("--launchers=torchrun runs on loopback only")
    names = os.environ["SIM_CLUSTER_NAMESPACES"].split()
    addresses = os.environ.get("SIM_CLUSTER_ADDRESSES", "").split()
    rank_hosts = len(names) - (1 if args.join and args.joiner_host == "own" else 0)
    if len(names) != len(addresses) or rank_hosts < 1 or args.ranks % rank_hosts != 0:
      parser.error(f"--ranks={args.ranks} must spread evenly over the simulated cluster's "
                   f"{rank_hosts} hosts for ranks")
    hosts = list(zip(names, addresses))
  output_dir = args.output_dir
  if not os.path.isabs(output_dir):
    output_dir = os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd()), output_dir)
  os.makedirs(output_dir, exist_ok=True)

  where = f"{len(hosts)} simulated hosts" if hosts else "loopback"
  event = "a process joining" if args.join else f"SIG{args.signal} of rank {args.kill}"
  print(f"elastic_recovery: {','.join(args.launchers)}, {args.ranks} ranks on {where}, {event} "
        f"{args.kill_after} s into training, {args.repeats} repeats", flush=True)
  rows = []
  for i in range(args.repeats):
    # The launchers take turns, so that the machine's load falls on each alike.
    for launcher in args.launchers:
      try:
        run_dir = os.path.join(output_dir, launcher, f"repeat{i}")
        flags = DEFAULT_TRAIN_FLAGS + [f"--log_jsonl={os.path.join(run_dir, 'steps.jsonl')}",
                                       "--print_freq=1"] + train_flags
        if launcher == "torchrun":
          row = one_torchrun_repeat(args, flags, run_dir)
        else:
          row = one_repeat(args, flags, run_dir, hosts)
      except RuntimeError as e:
        print(f"elastic_recovery: {launcher}, repeat {i}: {e}", file=sys.stderr)
        return 1
      row["repeat"] = i
      row["launcher"] = launcher
      rows.append(row)
      phases = ""
      if "failure_seen_s" in row:
        phases = (f"failure seen {row['failure_seen_s']:.3f} s, generation formed "
                  f"{row['generation_formed_s']:.3f} s, ")
      joined = ""
      if "joined_s" in row:
        joined = (f"; the joiner admitted {row['joined_s']:.3f} s, its first step "
                  f"{row['joiner_first_step_s']:.3f} s after it started")
      print(f"  {launcher}, repeat {i}: {phases}first step {row['first_step_s']:.3f} s after the "
            f"signal (went on from step {row['went_on_from_step']}, {row['steps_lost']} steps "
            f"lost){joined}", flush=True)
  for launcher in args.launchers:
    mine = [r for r in rows if r["launcher"] == launcher]
    firsts = [r["first_step_s"] for r in mine]
    lost = [r["steps_lost"] for r in mine]
    print(f"elastic_recovery: {launcher}: signal to the next step: median "
          f"{statistics.median(firsts):.3f} s, worst {max(firsts):.3f} s; steps lost: "
          f"{sum(lost)} in all, at most {max(lost)}")
  fields = ["repeat", "launcher", "ranks", "killed", "signal", "failure_seen_s",
            "generation_formed_s", "first_step_s", "went_on_from_step", "steps_lost", "joined_s",
            "joiner_first_step_s"]
  path = os.path.join(output_dir, "elastic_recovery.csv")
  with open(path, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=fields, restval="")
    writer.writeheader()
    for row in rows:
      writer.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in row.items()})
  print(f"elastic_recovery: wrote {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
