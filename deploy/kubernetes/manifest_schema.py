"""The Kubernetes core API parts of the manifests checked against Kubernetes' own schema.

kubectl's client-side validation downloads the schemas from an API server, and none runs here.
The Kubernetes Python client (Debian's python3-kubernetes) carries the core API's types generated
from the same OpenAPI schema: every field of a pod template, a Job template, a volume, a
container, and the PersistentVolumeClaim is checked against them, so that a misspelt or misplaced
field, or a value of the wrong kind, fails here as the API server would reject it. The operators'
own fields (PyTorchJob's, TrainJob's, Volcano's) are read by operator_contract.py, which fails on
any it needs and cannot find; they are not checked against the operators' CRDs.
"""

import re

import kubernetes.client as k8s

# Where each manifest embeds core API objects: a path of keys ('*' for every list item) and the
# type at its end.
EMBEDDED = {
    'PersistentVolumeClaim': [((), 'V1PersistentVolumeClaim')],
    'PyTorchJob': [(('spec', 'pytorchReplicaSpecs', '*', 'template'), 'V1PodTemplateSpec')],
    'ClusterTrainingRuntime': [(('spec', 'template', 'spec', 'replicatedJobs', '*', 'template'),
                                'V1JobTemplateSpec')],
    'TrainingRuntime': [(('spec', 'template', 'spec', 'replicatedJobs', '*', 'template'),
                         'V1JobTemplateSpec')],
    'TrainJob': [(('spec', 'trainer', 'resourcesPerNode'), 'V1ResourceRequirements')],
    'Job': [(('spec', 'tasks', '*', 'template'), 'V1PodTemplateSpec')],
}


def _at(obj, path):
    """The objects at `path` ('*' takes every item of a list or value of a map)."""
    if not path:
        return [obj]
    key, rest = path[0], path[1:]
    if key == '*':
        items = obj.values() if isinstance(obj, dict) else obj
        return [o for item in items for o in _at(item, rest)]
    if not isinstance(obj, dict) or key not in obj:
        return []
    return _at(obj[key], rest)


def _check(value, type_name, where, errors, quantity=False):
    """Appends to `errors` each field of `value` that `type_name` does not have, and each value
    of the wrong kind. `quantity`: a resource quantity, which may also be a number (cpu: 2)."""
    if value is None:
        return
    if quantity and isinstance(value, (int, float)) and not isinstance(value, bool):
        return
    m = re.fullmatch(r'list\[(.+)\]', type_name)
    if m:
        if not isinstance(value, list):
            errors.append('%s: a list expected, got %r' % (where, value))
            return
        for i, item in enumerate(value):
            _check(item, m.group(1), '%s[%d]' % (where, i), errors)
        return
    m = re.fullmatch(r'dict\(str, (.+)\)', type_name)
    if m:
        if not isinstance(value, dict):
            errors.append('%s: a map expected, got %r' % (where, value))
            return
        for key, item in value.items():
            _check(item, m.group(1), '%s.%s' % (where, key), errors, quantity)
        return
    if type_name == 'str':
        if not isinstance(value, str):
            errors.append('%s: a string expected, got %r (quote it)' % (where, value))
        return
    if type_name == 'int':
        if not isinstance(value, int) or isinstance(value, bool):
            errors.append('%s: an integer expected, got %r' % (where, value))
        return
    if type_name == 'bool':
        if not isinstance(value, bool):
            errors.append('%s: true or false expected, got %r' % (where, value))
        return
    if type_name in ('object', 'datetime', 'float'):
        return
    cls = getattr(k8s, type_name)
    if not isinstance(value, dict):
        errors.append('%s: a %s (a map) expected, got %r' % (where, type_name, value))
        return
    by_json = {json: attr for attr, json in cls.attribute_map.items()}
    for key, item in value.items():
        if key not in by_json:
            errors.append('%s: %s has no field %r' % (where, type_name, key))
            continue
        _check(item, cls.openapi_types[by_json[key]], '%s.%s' % (where, key), errors,
               type_name == 'V1ResourceRequirements')


def check_manifest(name, docs):
    """The errors in the core API objects of the manifest `name`'s documents; [] when none."""
    errors = []
    for doc in docs:
        kind = doc.get('kind')
        if kind not in EMBEDDED:
            errors.append('%s: no schema check for kind %r' % (name, kind))
            continue
        for path, type_name in EMBEDDED[kind]:
            found = _at(doc, path)
            if not found:
                errors.append('%s: %s has nothing at %s' % (name, kind, '.'.join(path)))
            for obj in found:
                _check(obj, type_name, '%s: %s.%s' % (name, kind, '.'.join(path)), errors)
    return errors


def self_check(docs):
    """Whether the check rejects a pod template broken in three ways: a check that cannot fail
    would pass anything."""
    import copy
    broken = copy.deepcopy(docs)
    (job,) = [d for d in broken if d['kind'] == 'PyTorchJob']
    spec = job['spec']['pytorchReplicaSpecs']['Master']['template']['spec']
    container = spec['containers'][0]
    container['volumeMount'] = container.pop('volumeMounts')
    container['ports'][0]['containerPort'] = str(container['ports'][0]['containerPort'])
    spec['restartPolicy'] = 3
    errors = '\n'.join(check_manifest('broken', broken))
    return all(text in errors for text in ("no field 'volumeMount'", 'an integer expected',
                                           'a string expected'))
