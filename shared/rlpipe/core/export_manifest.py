"""The export Job's last step: upload exactly the files to_huggingface wrote, the manifest last.

Publish pushes a run's export to the Hub with the deployment's write token, so what it pushes must
be what the export program wrote, and only that. Every workload writes the artifacts bucket as one
identity (docs/security.md), and a request's MaxText overrides may point a write key anywhere under
the run's own prefix, ``runs/<id>/hf/`` included; a listing of the prefix cannot tell the
program's objects from anyone else's. So the program does not write to GCS at all:

- given a ``gs://`` ``base_output_directory``, to_huggingface stages each file in a temporary
  directory under ``$TMPDIR``, uploads it and deletes it (maxtext 0.2.4
  ``checkpoint_conversion/utils/utils.py:604-616, 731-755``; the shards at ``:566-573``): once it exits, nothing local says
  what it wrote;
- given a local one, it writes the tokenizer, ``config.json``, the shards and the index into that
  directory and uploads nothing (``utils.py:617-620`` ``os.makedirs``, then ``:395-401``,
  ``:502-507``, ``:532-537``; the tokenizer's ``save_pretrained`` at ``:654-656``).

The export script creates :data:`LOCAL_DIR` on the pod's own volume just before the program runs
(``mkdir`` without ``-p``: it fails if the directory exists), and this step, run only after the
program exited 0:

1. walks that directory: regular files only (a symlink or any other kind of file stops it, so no
   link can make it upload something else of the pod's), each name one a manifest may carry
   (``layout.exported_path_ok``'s allowlist), at least one file;
2. hashes each file (sha256), then uploads them under the run's export prefix, four at a time as
   to_huggingface's own upload does (``--parallel_threads`` default 4, ``to_huggingface.py:121-130``;
   ``transfer_manager`` of the same storage client, threads);
3. writes :data:`rlpipe.core.layout.EXPORT_MANIFEST` last: every file's path, size and sha256.

The program is fixed text run with ``python3 -c``; where it reads and writes reaches it through the
container's environment (:func:`env`), never through the script. Any failure exits 1 with one line
saying why, as the program's own upload failure would. Pure: strings only.
"""

from __future__ import annotations

import shlex

from rlpipe.core import layout, pinning

ENV_DIR = "RLPIPE_EXPORT_DIR"
ENV_URI = "RLPIPE_EXPORT_URI"
ENV_MANIFEST = "RLPIPE_EXPORT_MANIFEST"
MARK = "rlpipe-manifest:"
LOCAL_DIR = f"{pinning.SCRATCH_MOUNT}/hf-export"  # to_huggingface's base_output_directory
UPLOAD_THREADS = 4
UPLOAD_TIMEOUT_SECONDS = 600  # per request, as to_huggingface sets for large shards (utils.py:751)

_PROGRAM = f"""\
import hashlib, json, os, re, stat, sys
CHUNK = 8 << 20
def stop(text):
    print("{MARK} " + text, flush=True)
    sys.exit(1)
local, dest, manifest_uri = os.environ["{ENV_DIR}"], os.environ["{ENV_URI}"], os.environ["{ENV_MANIFEST}"]
_, _, bucket_name, prefix = dest.split("/", 3)
if manifest_uri.split("/", 3)[2:] != [bucket_name, prefix + "{layout.EXPORT_MANIFEST}"]:
    stop(f"{{manifest_uri}} is not {layout.EXPORT_MANIFEST} under {{dest}}")
allowed = re.compile({layout.EXPORTED_PATH_PATTERN!r})
paths = []
for root, dirs, names in os.walk(local):
    for name in sorted(dirs) + sorted(names):
        full = os.path.join(root, name)
        rel = os.path.relpath(full, local).replace(os.sep, "/")
        mode = os.lstat(full).st_mode
        if stat.S_ISDIR(mode):
            continue
        if not stat.S_ISREG(mode):
            stop(f"{{rel}} under {{local}} is not a regular file; nothing is uploaded")
        if not allowed.fullmatch(rel) or rel == "{layout.EXPORT_MANIFEST}":
            stop(f"{{rel!r}} under {{local}} is not a name an export may have; nothing is uploaded")
        paths.append(rel)
paths.sort()
if not paths:
    stop(f"the program wrote no file under {{local}}; nothing to upload")
files = []
for rel in paths:
    h, n = hashlib.sha256(), 0
    with open(os.path.join(local, rel), "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
            n += len(chunk)
    files.append({{"path": rel, "size": n, "sha256": h.hexdigest()}})
total = sum(f["size"] for f in files)
print(f"{MARK} {{len(files)}} files ({{total}} bytes) written by the program under {{local}}", flush=True)
try:
    from google.cloud import storage
    from google.cloud.storage import transfer_manager
    bucket = storage.Client().bucket(bucket_name)
    transfer_manager.upload_many_from_filenames(
        bucket, paths, source_directory=local, blob_name_prefix=prefix,
        max_workers={UPLOAD_THREADS}, worker_type=transfer_manager.THREAD, raise_exception=True,
        upload_kwargs={{"timeout": {UPLOAD_TIMEOUT_SECONDS}}},
    )
    manifest = json.dumps({{"files": files}}, indent=1, sort_keys=True)
    bucket.blob(prefix + "{layout.EXPORT_MANIFEST}").upload_from_string(manifest, content_type="application/json")
except Exception as exc:
    stop(f"uploading the export to {{dest}} failed ({{type(exc).__name__}}: {{exc}}); no manifest written")
print(f"{MARK} uploaded to {{dest}}; {{manifest_uri}} written last", flush=True)
"""


def manifest_line() -> str:
    """The export script's last step (exec'd once the program exited 0)."""
    return f"exec python3 -c {shlex.quote(_PROGRAM)}"


def env(run: layout.RunLayout) -> list[dict[str, str]]:
    """The step's environment entries: the program's local directory, the run's export prefix and
    the manifest's name there (values, never pasted into the script)."""
    return [
        {"name": ENV_DIR, "value": LOCAL_DIR},
        {"name": ENV_URI, "value": run.uri(run.hf_dir)},
        {"name": ENV_MANIFEST, "value": run.uri(run.export_manifest)},
    ]
