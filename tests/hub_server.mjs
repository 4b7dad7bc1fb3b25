// hub_server.mjs — a model hub on 127.0.0.1 for tests/test_pull.c, with the
// API paths and headers of the real ones (tools/pull_hub.c says which):
//   Hugging Face  GET /api/models/O/N/revision/REV[?blobs=true]
//                 GET /O/N/resolve/REV/FILE  (LFS files: 302 to /cdn/..., with
//                     X-Repo-Commit, ETag, X-Linked-Etag, X-Linked-Size)
//   ModelScope    GET /api/v1/models/O/N/repo/files?Revision=REV&Recursive=true
//                 GET /api/v1/models/O/N/repo?Revision=REV&FilePath=FILE
//   the test      GET /__log  (every request seen, the most downloads at once)
// Files are served with Range (206, Content-Range) from ROOT/O/N/. Faults per
// repository, from ROOT/hub.json {"token": T, "repos": {"O/N": {...}}}:
//   private: true      401 (X-Error-Code GatedRepo) without "Bearer T"
//   bad_sha: [FILE]    the listing's sha256 (and git blob id) of FILE is wrong
//   drop_once: [FILE]  the first download of FILE stops halfway (socket destroyed)
//   slow: true         bodies go out in 64 KiB pieces 5 ms apart
// Usage: node hub_server.mjs ROOT; prints "port N" once listening; exits when
// its stdin closes (the test ended) or after 300 s, whichever comes first.
import { createHash } from 'node:crypto';
import { readFileSync, readdirSync, statSync, existsSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';

const ROOT = process.argv[2];
const conf = JSON.parse(readFileSync(join(ROOT, 'hub.json'), 'utf8'));
const COMMIT = 'c0ffee' + '0'.repeat(34);
const log = [];
let inflight = 0, maxInflight = 0;
const dropped = new Set();
const shaCache = new Map();

function sha256(path) {
  if (!shaCache.has(path)) shaCache.set(path, createHash('sha256').update(readFileSync(path)).digest('hex'));
  return shaCache.get(path);
}
const isLfs = (f) => f.endsWith('.safetensors');

// The repository's files (top level and one folder down, as a real repo has).
function listRepo(repo) {
  const dir = join(ROOT, repo), out = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.isDirectory()) {
      for (const f of readdirSync(join(dir, e.name))) out.push(e.name + '/' + f);
    } else out.push(e.name);
  }
  return out.map((f) => {
    const path = join(dir, f), size = statSync(path).size;
    let sha = sha256(path);
    if ((conf.repos[repo]?.bad_sha || []).includes(f)) sha = sha.replace(/^./, (c) => (c === '0' ? '1' : '0'));
    // git's blob id: SHA-1 of "blob SIZE\0" and the bytes
    let blob = createHash('sha1').update(`blob ${size}\0`).update(readFileSync(path)).digest('hex');
    if ((conf.repos[repo]?.bad_sha || []).includes(f)) blob = blob.replace(/^./, (c) => (c === '0' ? '1' : '0'));
    return { f, path, size, sha, blob };
  });
}

function authorized(repo, req) {
  const r = conf.repos[repo] || {};
  return !r.private || req.headers.authorization === 'Bearer ' + conf.token;
}

function deny(res, repo) {
  res.writeHead(401, { 'X-Error-Code': 'GatedRepo', 'X-Error-Message': `Access to model ${repo} is restricted.` });
  res.end('{"error":"gated"}');
}

// The bytes of path, honouring Range; faults as configured.
function sendFile(req, res, repo, file, path, extra) {
  const size = statSync(path).size, r = conf.repos[repo] || {};
  let start = 0, status = 200;
  const m = /^bytes=(\d+)-$/.exec(req.headers.range || '');
  if (m) {
    start = Number(m[1]);
    if (start >= size) {
      res.writeHead(416, { 'Content-Range': `bytes */${size}` });
      return res.end();
    }
    status = 206;
  }
  const headers = { 'Content-Length': String(size - start), 'Accept-Ranges': 'bytes', ...extra };
  if (status === 206) headers['Content-Range'] = `bytes ${start}-${size - 1}/${size}`;
  res.writeHead(status, headers);
  const data = readFileSync(path).subarray(start);
  const drop = (r.drop_once || []).includes(file) && !dropped.has(file);
  if (drop) dropped.add(file);
  const end = drop ? Math.floor(data.length / 2) : data.length;
  const step = r.slow ? 65536 : data.length || 1;
  inflight++;
  maxInflight = Math.max(maxInflight, inflight);
  let off = 0;
  const done = () => { inflight--; };
  const pump = () => {
    if (off >= end) {
      done();
      return res.end();
    }
    const n = Math.min(step, end - off);
    off += n;
    if (drop && off >= end) { // the half written, then the connection cut
      done();
      return res.write(data.subarray(off - n, off), () => setTimeout(() => req.socket.destroy(), 20));
    }
    res.write(data.subarray(off - n, off));
    if (r.slow) setTimeout(pump, 5); else pump();
  };
  pump();
}

function hf(req, res, url) {
  let m = /^\/api\/models\/([^/]+\/[^/]+)\/revision\/([^/]+)$/.exec(url.pathname);
  if (m) {
    const repo = m[1];
    if (!existsSync(join(ROOT, repo))) return deny(res, repo); // as the Hub: 401 for an unknown repo too
    if (!authorized(repo, req)) return deny(res, repo);
    const blobs = url.searchParams.get('blobs') === 'true';
    const siblings = listRepo(repo).map(({ f, size, sha, blob }) => {
      const s = { rfilename: f };
      if (blobs) {
        s.size = size;
        s.blobId = isLfs(f) ? sha.slice(0, 40) : blob; // an LFS file's blobId is its pointer's: not checked
        if (isLfs(f)) s.lfs = { sha256: sha, size, pointerSize: 134 };
      }
      return s;
    });
    res.writeHead(200, { 'Content-Type': 'application/json' });
    return res.end(JSON.stringify({ id: repo, sha: COMMIT, siblings }));
  }
  m = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname);
  if (m) {
    const [, repo, , fileEnc] = m, file = decodeURIComponent(fileEnc);
    if (!authorized(repo, req)) return deny(res, repo);
    const ent = listRepo(repo).find((e) => e.f === file);
    if (!ent) { res.writeHead(404, { 'X-Error-Code': 'EntryNotFound' }); return res.end(); }
    const common = { 'X-Repo-Commit': COMMIT };
    if (isLfs(file)) {
      res.writeHead(302, { ...common, Location: `/cdn/${repo}/${encodeURIComponent(file)}?X-Amz-Signature=x`,
        ETag: `"${ent.sha}"`, 'X-Linked-Etag': `"${ent.sha}"`, 'X-Linked-Size': String(ent.size) });
      return res.end();
    }
    return sendFile(req, res, repo, file, ent.path, { ...common, ETag: `"${ent.blob}"` });
  }
  m = /^\/cdn\/([^/]+\/[^/]+)\/([^/]+)$/.exec(url.pathname);
  if (m) {
    const file = decodeURIComponent(m[2]);
    return sendFile(req, res, m[1], file, join(ROOT, m[1], file), {});
  }
  return false;
}

function modelscope(req, res, url) {
  let m = /^\/api\/v1\/models\/([^/]+\/[^/]+)\/repo\/files$/.exec(url.pathname);
  if (m) {
    const repo = m[1];
    if (!authorized(repo, req)) return deny(res, repo);
    const Files = listRepo(repo).map(({ f, size, sha }) => ({ Name: f.split('/').pop(), Path: f, Size: size,
      Sha256: sha, Type: 'blob', Revision: url.searchParams.get('Revision') }));
    res.writeHead(200, { 'Content-Type': 'application/json' });
    return res.end(JSON.stringify({ Code: 200, Data: { Files }, Success: true }));
  }
  m = /^\/api\/v1\/models\/([^/]+\/[^/]+)\/repo$/.exec(url.pathname);
  if (m) {
    const repo = m[1], file = url.searchParams.get('FilePath');
    if (!authorized(repo, req)) return deny(res, repo);
    const ent = listRepo(repo).find((e) => e.f === file);
    if (!ent) { res.writeHead(404); return res.end(); }
    return sendFile(req, res, repo, file, ent.path, {});
  }
  return false;
}

const server = createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  log.push({ method: req.method, url: req.url, range: req.headers.range || null,
    auth: req.headers.authorization ? 'yes' : 'no' });
  if (url.pathname === '/__log') {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    return res.end(JSON.stringify({ requests: log, max_inflight: maxInflight }));
  }
  if (hf(req, res, url) === false && modelscope(req, res, url) === false) {
    res.writeHead(404);
    res.end();
  }
});
server.listen(0, '127.0.0.1', () => process.stdout.write(`port ${server.address().port}\n`));
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
setTimeout(() => process.exit(0), 300000).unref();
