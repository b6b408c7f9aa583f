#!/usr/bin/python3
"""The manifests of deploy/kubernetes held to their operators' contracts on one machine.

First, the Kubernetes core API objects in every manifest (pod and Job templates, volumes, the
claim) are checked against the API's own types (manifest_schema.py). Then, for each operator (Kubeflow's PyTorchJob, Kubeflow Trainer v2, Volcano) and 1 and 2 processes per
pod, the pods of the operator's manifest run as network, PID, mount and UTS namespaces joined by a
veth pair (as experiments/sim_cluster makes hosts), each given exactly the environment the
operator's controller injects (from its source code: see OPERATORS below) and the kubelet's, and
the manifest's own command and arguments (with the kubelet's $(VAR) expansion). As on a cluster:

- the workers start first and the master's service name resolves only once the master pod is up
  (and not while it is down);
- once a checkpoint is on the shared volume, a pod is SIGKILLed (the worker with 1 process per
  pod, the master, whose names then stop resolving, with 2); pods whose container fails are
  restarted as the kubelet does (restartPolicy OnFailure), and resume from the checkpoint
  (--resume);
- the final state_dict must be byte-identical to the project's launcher's (`launch` with explicit
  flags on the same two hosts, nothing killed).

Usage (as root): operator_contract.py TRAIN LAUNCH [--operators=pytorchjob,trainjob,volcano]
  [--procs=1,2] [--keep]
Prints PASS or the failed checks; exits 0, 1 (a check failed) or 77 (cannot run here: the reason).
"""

import argparse
import copy
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77

# Short training, so that a run takes seconds: the manifests' flags come first, these after them
# (the last occurrence of a flag wins). The checkpoint every 4 steps gives the kill its target.
FAST_FLAGS = ['--train_limit=1024', '--val_limit=256', '--batch_size=32', '--epochs=2',
              '--checkpoint_every_steps=4', '--timeout=60s', '--print_freq=8',
              '--metrics_port=-1', '--optimizer=sgd', '--lr=0.05']

# What the kubelet sets in every container besides the operator's variables.
def kubelet_env(pod_name):
    return {
        'PATH': os.environ['POD_PATH'],
        'HOME': '/root',
        'HOSTNAME': pod_name,
        'KUBERNETES_SERVICE_HOST': '10.96.0.1',
        'KUBERNETES_SERVICE_PORT': '443',
        'KUBERNETES_PORT': 'tcp://10.96.0.1:443',
    }


def expand(text, env):
    """The kubelet's $(VAR) expansion of command and args; $$(VAR) stays $(VAR)."""
    def sub(m):
        if m.group(1) is not None:
            return '$(%s)' % m.group(1)
        return env.get(m.group(2), m.group(0))
    return re.sub(r'\$\$\(([A-Za-z_]\w*)\)|\$\(([A-Za-z_]\w*)\)', sub, text)


class Pod:
    """One pod of the job: its name, the DNS names that resolve to it, its environment and
    command line, and whether it is the master (whose names resolve only while it is up)."""

    def __init__(self, name, dns, env, argv, master):
        self.name, self.dns, self.env, self.argv, self.master = name, dns, env, argv, master


def container_named(spec, name, where):
    for c in spec['containers']:
        if c['name'] == name:
            return c
    raise ValueError('%s: no container named %r, which the operator requires' % (where, name))


def command_of(container, env, override=None):
    command = (override or {}).get('command') or container.get('command') or []
    args = (override or {}).get('args') or container.get('args') or []
    return [expand(a, env) for a in command + args]


def container_env(container):
    return {e['name']: str(e.get('value', '')) for e in container.get('env', [])}


def pytorchjob_pods(docs, procs):
    """kubeflow/trainer release-1.9, pkg/controller.v1/pytorch/{envvar,master}.go: MASTER_ADDR is
    <job>-master-0 (a headless service per pod), MASTER_PORT the port named pytorchjob-port
    (23456 by default), WORLD_SIZE pods x nprocPerNode (x 1 for "auto"), RANK and PET_NODE_RANK
    the pod's index (workers from 1), PET_NNODES the pods, PET_NPROC_PER_NODE nprocPerNode."""
    (job,) = [d for d in docs if d['kind'] == 'PyTorchJob']
    name = job['metadata']['name']
    spec = job['spec']
    spec['nprocPerNode'] = str(procs)
    replicas = spec['pytorchReplicaSpecs']
    total = sum(r['replicas'] for r in replicas.values())
    master = replicas['Master']
    if master['replicas'] != 1:
        raise ValueError('PyTorchJob: Master replicas must be 1')
    port = 23456
    for p in container_named(master['template']['spec'], 'pytorch', 'Master').get('ports', []):
        if p.get('name') == 'pytorchjob-port':
            port = p['containerPort']
    nproc = spec['nprocPerNode']
    factor = int(nproc) if nproc.isdigit() else 1
    pods = []
    for rtype in ('Master', 'Worker'):
        if rtype not in replicas:
            continue
        template = replicas[rtype]['template']['spec']
        container = container_named(template, 'pytorch', rtype)
        for index in range(replicas[rtype]['replicas']):
            rank = index + (1 if rtype == 'Worker' else 0)
            pod = '%s-%s-%d' % (name, rtype.lower(), index)
            env = kubelet_env(pod)
            env.update(container_env(container))
            env.update({
                'PYTHONUNBUFFERED': '1',
                'MASTER_PORT': str(port), 'PET_MASTER_PORT': str(port),
                'MASTER_ADDR': '%s-master-0' % name, 'PET_MASTER_ADDR': '%s-master-0' % name,
                'WORLD_SIZE': str(total * factor), 'RANK': str(rank),
                'PET_NODE_RANK': str(rank), 'PET_NPROC_PER_NODE': nproc,
                'PET_NNODES': str(total),
            })
            pods.append(Pod(pod, [pod], env, command_of(container, env), rtype == 'Master'))
    return pods


def trainjob_pods(docs, procs):
    """kubeflow/trainer master, pkg/runtime/framework/plugins/torch/torch.go: only PET_NNODES
    (numNodes), PET_NPROC_PER_NODE (numProcPerNode), PET_NODE_RANK (the Job's completion index),
    PET_MASTER_ADDR (<trainjob>-node-0-0.<trainjob>) and PET_MASTER_PORT (29500), in the
    container named `node` of the replicated job `node`; the TrainJob's command and args replace
    the runtime's."""
    (runtime,) = [d for d in docs if d['kind'] in ('ClusterTrainingRuntime', 'TrainingRuntime')]
    (job,) = [d for d in docs if d['kind'] == 'TrainJob']
    if runtime['metadata'].get('labels', {}).get('trainer.kubeflow.org/framework') != 'torch':
        raise ValueError('runtime: the label trainer.kubeflow.org/framework: torch is missing')
    if job['spec']['runtimeRef']['name'] != runtime['metadata']['name']:
        raise ValueError('TrainJob: runtimeRef does not name the runtime')
    (node,) = [r for r in runtime['spec']['template']['spec']['replicatedJobs']
               if r['name'] == 'node']
    labels = node['template'].get('metadata', {}).get('labels', {})
    if labels.get('trainer.kubeflow.org/trainjob-ancestor-step') != 'trainer':
        raise ValueError('runtime: the node job lacks trainjob-ancestor-step: trainer')
    container = container_named(node['template']['spec']['template']['spec'], 'node', 'node')
    name = job['metadata']['name']
    trainer = job['spec']['trainer']
    trainer['numProcPerNode'] = procs
    nodes = trainer.get('numNodes', runtime['spec']['mlPolicy'].get('numNodes', 1))
    pods = []
    for index in range(nodes):
        pod = '%s-node-0-%d' % (name, index)
        env = kubelet_env(pod)
        env.update(container_env(container))
        env.update({
            'PET_NNODES': str(nodes), 'PET_NPROC_PER_NODE': str(trainer['numProcPerNode']),
            'PET_NODE_RANK': str(index), 'PET_MASTER_ADDR': '%s-node-0-0.%s' % (name, name),
            'PET_MASTER_PORT': '29500',
        })
        pods.append(Pod(pod, ['%s.%s' % (pod, name)], env, command_of(container, env, trainer),
                        index == 0))
    return pods


def volcano_pods(docs, procs):
    """volcano-sh/volcano master, pkg/controllers/job/plugins/distributed-framework/pytorch: the
    job controller sets VK_TASK_INDEX and VC_TASK_INDEX in every pod, the svc plugin makes
    <job>-<task>-<i>.<job> resolve (and sets VC_<TASK>_HOSTS and VC_<TASK>_NUM); MASTER_ADDR names
    the master task's pod 0,
    MASTER_PORT is --port (23456), WORLD_SIZE the pods of both tasks, RANK 0 for the master and
    the pod's index + 1 for workers. The processes per pod are the container's --nproc_per_node,
    which the test sets to `procs` (none for 1)."""
    (job,) = [d for d in docs if d['kind'] == 'Job']
    name = job['metadata']['name']
    options = {'master': 'master', 'worker': 'worker', 'port': '23456'}
    for arg in job['spec']['plugins']['pytorch']:
        key, _, value = arg.lstrip('-').partition('=')
        options[key] = value
    tasks = {t['name']: t for t in job['spec']['tasks']}
    master, worker = tasks[options['master']], tasks[options['worker']]
    total = master['replicas'] + worker['replicas']
    pods = []
    for task, first_rank in ((master, 0), (worker, 1)):
        container = task['template']['spec']['containers'][0]
        container = copy.deepcopy(container)
        args = [a for a in container.get('args', []) if not a.startswith('--nproc_per_node')]
        if procs > 1:
            args.insert(0, '--nproc_per_node=%d' % procs)
        container['args'] = args
        for index in range(task['replicas']):
            pod = '%s-%s-%d' % (name, task['name'], index)
            env = kubelet_env(pod)
            env.update(container_env(container))
            # The job controller's task index in every pod; the svc plugin's hosts and counts.
            env.update({
                'VK_TASK_INDEX': str(index), 'VC_TASK_INDEX': str(index),
            })
            for t in (master, worker):
                key = t['name'].upper().replace('-', '_')
                env['VC_%s_HOSTS' % key] = ','.join(
                    '%s-%s-%d.%s' % (name, t['name'], i, name) for i in range(t['replicas']))
                env['VC_%s_NUM' % key] = str(t['replicas'])
            env.update({
                'MASTER_ADDR': '%s-%s-0.%s' % (name, options['master'], name),
                'MASTER_PORT': options['port'],
                'WORLD_SIZE': str(total),
                'RANK': str(0 if task is master else first_rank + index),
            })
            pods.append(Pod(pod, ['%s.%s' % (pod, name)], env, command_of(container, env),
                            task is master))
    return pods


OPERATORS = {
    'pytorchjob': ('pytorchjob.yaml', pytorchjob_pods),
    'trainjob': ('trainjob.yaml', trainjob_pods),
    'volcano': ('volcano-job.yaml', volcano_pods),
}


class Cluster:
    """Two hosts: network namespaces joined by a veth pair, 10.215.<n>.1 and .2."""

    def __init__(self, tmp, subnet):
        self.tmp = tmp
        self.tag = '%d' % os.getpid()
        self.ns = ['dtk8s_a_' + self.tag, 'dtk8s_b_' + self.tag]
        self.ips = [subnet + '.1', subnet + '.2']
        self.ifnames = ['ka' + self.tag, 'kb' + self.tag]

    def up(self):
        for ns in self.ns:
            run(['ip', 'netns', 'add', ns])
            run(['ip', '-n', ns, 'link', 'set', 'lo', 'up'])
        run(['ip', 'link', 'add', self.ifnames[0], 'type', 'veth', 'peer', 'name',
             self.ifnames[1]])
        for ns, ifname, ip in zip(self.ns, self.ifnames, self.ips):
            run(['ip', 'link', 'set', ifname, 'netns', ns])
            run(['ip', '-n', ns, 'addr', 'add', ip + '/24', 'dev', ifname])
            run(['ip', '-n', ns, 'link', 'set', ifname, 'up'])

    def down(self):
        for ns in self.ns:
            for pid in subprocess.run(['ip', 'netns', 'pids', ns], capture_output=True,
                                      text=True).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(['ip', 'netns', 'del', ns], capture_output=True)


def run(argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError('%s: %s' % (' '.join(argv), r.stderr.strip()))


class PodProcess:
    """A pod on a host: its own PID, mount and UTS namespaces in the host's network namespace,
    its hostname the pod's name, /etc/hosts the kubelet's (itself) plus the names the cluster's
    DNS resolves now, and the shared volume at /mnt. Restarted in place, as the kubelet does."""

    def __init__(self, pod, ns, ip, tmp, shared):
        self.pod, self.ns, self.ip, self.shared = pod, ns, ip, shared
        self.hosts = os.path.join(tmp, 'hosts.' + pod.name)
        self.log = os.path.join(tmp, pod.name + '.log')
        self.proc = None
        self.starts = 0

    def write_hosts(self, records):
        lines = ['127.0.0.1\tlocalhost', '%s\t%s' % (self.ip, self.pod.name)]
        lines += ['%s\t%s' % (ip, n) for n, ip in sorted(records.items())]
        # In place: the pod's bind mount holds this inode.
        with open(self.hosts, 'r+' if os.path.exists(self.hosts) else 'w') as f:
            f.seek(0)
            f.write('\n'.join(lines) + '\n')
            f.truncate()

    def start(self):
        self.starts += 1
        # The image's layout: train and launch in /usr/local/bin; a container's own /tmp (the
        # flight recorder's dumps stay in the pod).
        script = ('mount --bind "$1" /etc/hosts && mount --bind "$2" /mnt && '
                  'mount --bind "$3" /usr/local/bin && mount -t tmpfs tmpfs /tmp && '
                  'hostname "$4" && shift 4 && exec env -i "$@"')
        env_args = ['%s=%s' % kv for kv in sorted(self.pod.env.items())]
        argv = (['ip', 'netns', 'exec', self.ns, 'unshare', '--pid', '--fork', '--kill-child',
                 '--mount-proc', '--uts', '--', '/bin/sh', '-c', script, 'pod', self.hosts,
                 self.shared, os.environ['POD_BIN'], self.pod.name] + env_args + self.pod.argv)
        with open(self.log, 'a') as log:
            log.write('=== start %d of pod %s: %s\n' % (self.starts, self.pod.name,
                                                       ' '.join(self.pod.argv)))
            log.flush()
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        # unshare --kill-child: its child, the PID namespace's init, dies with it, and with the
        # init every process of the pod.
        if self.running():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def output(self):
        with open(self.log, errors='replace') as f:
            return f.read()


def tail(text, n=8):
    return '\n'.join(text.rstrip('\n').split('\n')[-n:])


class Check:
    def __init__(self):
        self.failures = []

    def fail(self, message):
        print('FAIL: ' + message, flush=True)
        self.failures.append(message)


def train_args(argv):
    """The training's flags of a pod's command line: what follows `train`."""
    return argv[1:]


def rank_running(ns):
    """Whether a train process that is a rank runs in `ns`: one its launcher started (LOCAL_RANK),
    or one that an operator's RANK makes a rank by itself (no PET_* and no --nproc_per_node)."""
    pids = subprocess.run(['ip', 'netns', 'pids', ns], capture_output=True, text=True).stdout
    for pid in pids.split():
        try:
            with open('/proc/%s/comm' % pid) as f:
                if f.read().strip() != 'train':
                    continue
            with open('/proc/%s/environ' % pid, 'rb') as f:
                env = [e.split(b'=', 1)[0] for e in f.read().split(b'\0')]
            with open('/proc/%s/cmdline' % pid, 'rb') as f:
                cmdline = f.read()
        except OSError:
            continue
        if b'LOCAL_RANK' in env:
            return True
        if (b'RANK' in env and not any(e.startswith(b'PET_') for e in env)
                and b'--nproc_per_node' not in cmdline):
            return True
    return False


def wait_for_ranks(workers, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(rank_running(w.ns) for w in workers):
            return True
        time.sleep(0.1)
    return False


def run_job(cluster, pods, tmp, label, kill, check, deadline_s=240):
    """Runs the pods to the end, as the kubelet would: the master's names resolve only while it
    runs; a container that fails is restarted after a second (at most 4 times). With `kill`
    ('master' or 'worker'), the workers start first, the master 1.5 s after their ranks run, and
    that pod is
    SIGKILLed once a checkpoint is on the shared volume. Returns the shared folder and the pods,
    or None when the job did not succeed."""
    shared = os.path.join(tmp, label)
    # Mounted at /mnt: the manifests' volume is at /mnt/checkpoints.
    os.makedirs(os.path.join(shared, 'checkpoints'))
    procs = [PodProcess(p, cluster.ns[i], cluster.ips[i], tmp, shared) for i, p in enumerate(pods)]
    records = {}

    def publish():
        records.clear()
        for pp in procs:
            if not pp.pod.master or pp.running():
                for name in pp.pod.dns:
                    records[name] = pp.ip
        for pp in procs:
            pp.write_hosts(records)

    publish()
    order = sorted(procs, key=lambda pp: pp.pod.master)  # workers first
    start = time.monotonic()
    for pp in order:
        if pp.pod.master and kill:
            # The workers' ranks run, and look for a master whose name does not resolve yet.
            if not wait_for_ranks([w for w in procs if not w.pod.master], 60):
                check.fail('%s: no worker rank started within 60 s' % label)
                return None
            time.sleep(1.5)
        pp.start()
        publish()
    killed = not kill
    restarts = 0
    done = {pp.pod.name: False for pp in procs}
    next_start = {}
    try:
        while not all(done.values()):
            if time.monotonic() - start > deadline_s:
                check.fail('%s: did not end within %d s' % (label, deadline_s))
                return None
            if not killed and glob.glob(os.path.join(shared, '**', 'checkpoint-*'), recursive=True):
                # The workers waited for the late master instead of failing and restarting.
                restarted = [pp.pod.name for pp in procs if pp.starts > 1]
                if restarted:
                    check.fail('%s: %s restarted before the kill (a worker that failed while the '
                               'master did not resolve?): %s' % (label, ', '.join(restarted),
                                                                   tail(procs[-1].output())))
                victim = [pp for pp in procs if pp.pod.master == (kill == 'master')][0]
                print('%s: checkpoint on the volume after %.1f s: SIGKILL pod %s' %
                      (label, time.monotonic() - start, victim.pod.name), flush=True)
                victim.kill()
                killed = True
            for pp in procs:
                name = pp.pod.name
                if done[name] or pp.running():
                    continue
                if name in next_start:
                    if time.monotonic() >= next_start[name]:
                        del next_start[name]
                        pp.start()
                        publish()
                    continue
                rc = pp.proc.returncode
                if rc == 0:
                    done[name] = True
                    continue
                publish()  # a master that is down no longer resolves
                restarts += 1
                if pp.starts > 4:
                    check.fail('%s: pod %s failed %d times; last: %s' %
                               (label, name, pp.starts, tail(pp.output())))
                    return None
                print('%s: pod %s exited %s after %.1f s: restarting it' %
                      (label, name, rc, time.monotonic() - start), flush=True)
                next_start[name] = time.monotonic() + 1.0
            time.sleep(0.05)
    finally:
        for pp in procs:
            pp.kill()
    if kill and not killed:
        check.fail('%s: the job ended before a checkpoint was written' % label)
    print('%s: every pod exited 0 after %.1f s (%d restarts)' %
          (label, time.monotonic() - start, restarts), flush=True)
    return shared, procs


def main():
    # Bazel's timeout sends SIGTERM: the pods, namespaces and files go as after a normal end.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    parser = argparse.ArgumentParser()
    parser.add_argument('train')
    parser.add_argument('launch')
    parser.add_argument('--operators', default=','.join(OPERATORS))
    parser.add_argument('--procs', default='1,2')
    parser.add_argument('--keep', action='store_true')
    args = parser.parse_args()
    check = Check()
    # The core API objects of every manifest, against Kubernetes' own types (no root needed).
    try:
        import manifest_schema  # needs Debian's python3-kubernetes
    except ImportError as e:
        print('schema: not checked: %s (apt-get install python3-kubernetes)' % e)
        manifest_schema = None
    manifests = ['checkpoints-pvc.yaml'] + [m for m, _ in OPERATORS.values()]
    for manifest in manifests if manifest_schema else []:
        with open(os.path.join(HERE, manifest)) as f:
            docs = list(yaml.safe_load_all(f))
        for error in manifest_schema.check_manifest(manifest, docs):
            check.fail(error)
        if manifest == 'pytorchjob.yaml' and not manifest_schema.self_check(docs):
            check.fail('the schema check let a broken pod template through')
    if manifest_schema:
        print('schema: %d manifests checked against the Kubernetes API\'s types' %
              len(manifests))
    if check.failures:
        return 1
    if os.geteuid() != 0:
        print('SKIP: the pods need root to create network, PID, mount and UTS namespaces')
        return SKIP
    for tool in ('ip', 'unshare'):
        if shutil.which(tool) is None:
            print('SKIP: %s is not installed (iproute2, util-linux)' % tool)
            return SKIP
    tmp = tempfile.mkdtemp(prefix='k8s_contract.', dir=os.environ.get('TEST_TMPDIR'))
    bindir = os.path.join(tmp, 'bin')
    os.makedirs(bindir)
    # The image's PATH holds train and launch (deploy/container).
    os.symlink(os.path.abspath(args.train), os.path.join(bindir, 'train'))
    os.symlink(os.path.abspath(args.launch), os.path.join(bindir, 'launch'))
    os.environ['POD_BIN'] = bindir
    os.environ['POD_PATH'] = '/usr/local/bin:/usr/bin:/bin'
    cluster = Cluster(tmp, '10.215.%d' % (os.getpid() % 200 + 20))
    try:
        try:
            cluster.up()
        except RuntimeError as e:
            print('SKIP: cannot make the hosts: %s' % e)
            return SKIP
        references = {}
        for procs in [int(p) for p in args.procs.split(',')]:
            for op in args.operators.split(','):
                manifest, make_pods = OPERATORS[op]
                with open(os.path.join(HERE, manifest)) as f:
                    docs = list(yaml.safe_load_all(f))
                try:
                    pods = make_pods(docs, procs)
                except (ValueError, KeyError) as e:
                    check.fail('%s: the manifest breaks the operator\'s contract: %r' % (op, e))
                    continue
                if len(pods) != 2:
                    check.fail('%s: %d pods, the test runs 2' % (op, len(pods)))
                    continue
                for pod in pods:
                    if os.path.basename(pod.argv[0]) != 'train':
                        check.fail('%s: pod %s runs %r, not train' % (op, pod.name, pod.argv))
                    pod.argv = pod.argv + FAST_FLAGS
                flags = [a for a in pods[0].argv[1:] if not a.startswith('--nproc_per_node')]
                state = [a.split('=', 1)[1] for a in flags if a.startswith('--save_state_dict=')]
                if not state:
                    check.fail('%s: the manifest saves no --save_state_dict' % op)
                    continue
                if procs not in references:
                    references[procs] = reference(cluster, tmp, flags, procs, state[0], check)
                label = '%s_%dx%d' % (op, len(pods), procs)
                result = run_job(cluster, pods, tmp, label, 'worker' if procs == 1 else 'master',
                                 check)
                if result is None:
                    continue
                shared, pps = result
                master_log = [pp for pp in pps if pp.pod.master][0].output()
                last_start = master_log.rsplit('=== start', 1)[-1]
                if 'resumed from' not in last_start:
                    check.fail('%s: the restarted master did not resume: %s' %
                               (label, tail(last_start)))
                if procs == 1 and op == 'volcano':
                    want = 'from kubernetes'
                else:
                    want = 'train: from the environment:'
                if want not in master_log:
                    check.fail('%s: the master log lacks %r: %s' % (label, want, tail(master_log)))
                got = os.path.join(shared, os.path.relpath(state[0], '/mnt'))
                if references.get(procs) is None or not os.path.exists(got):
                    check.fail('%s: no state_dict to compare (%s)' % (label, got))
                elif open(got, 'rb').read() != open(references[procs], 'rb').read():
                    check.fail('%s: the final state_dict differs from the launcher\'s' % label)
                else:
                    print('%s: the final state_dict equals the launcher\'s, byte for byte' % label,
                          flush=True)
    finally:
        cluster.down()
        if args.keep:
            print('kept ' + tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if check.failures:
        print('%d check(s) failed' % len(check.failures))
        return 1
    print('PASS')
    return 0


def reference(cluster, tmp, flags, procs, state_path, check):
    """The project's launcher with explicit flags on the same two hosts: the result every
    operator's run must reproduce."""
    label = 'launcher_2x%d' % procs
    port = 29400 + procs
    pods = []
    for node in range(2):
        name = 'ref-%d' % node
        env = {'PATH': os.environ['POD_PATH'], 'HOME': '/root', 'HOSTNAME': name}
        argv = ['launch', '--nnodes=2', '--node_rank=%d' % node, '--nproc_per_node=%d' % procs,
                '--master_addr=%s' % cluster.ips[0], '--master_port=%d' % port, '--', 'train']
        pods.append(Pod(name, [name], env, argv + flags, node == 0))
    result = run_job(cluster, pods, tmp, label, None, check)
    if result is None:
        return None
    path = os.path.join(result[0], os.path.relpath(state_path, '/mnt'))
    if not os.path.exists(path):
        check.fail('%s: wrote no %s' % (label, state_path))
        return None
    return path


if __name__ == '__main__':
    sys.exit(main())
