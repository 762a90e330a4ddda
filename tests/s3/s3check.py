#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A tiny S3 client with its own AWS Signature Version 4 signing.

Why: the object-store tier is tested against a real S3 server (radosgw, see
radosgw.sh) that verifies signatures, and the tests need a client that is
independent of the daemon's C signer, needs nothing but Python's standard
library (the CI machine has no boto3, and nothing can be downloaded), and is
small enough to read.  The signing follows the AWS documentation ("Signature
Calculations for the Authorization Header", S3 API reference); `selftest`
checks it against the published GET-object example from that page.

Use as a module (S3Client) or from the command line:

    s3check.py --env DIR/env check-auth     # right secret 200, wrong 403
    s3check.py --env DIR/env mb BUCKET | ls [BUCKET] | put BUCKET KEY FILE |
               get BUCKET KEY FILE | rm BUCKET KEY | rb BUCKET
    s3check.py selftest                     # published SigV4 test vector
    s3check.py --endpoint URL wait SECONDS  # until the server answers HTTP

Credentials come from --env FILE (the key=value lines radosgw.sh writes),
or --endpoint/--access-key/--secret-key/--region, or the environment
(S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION).
"""
import argparse
import datetime
import hashlib
import hmac
import http.client
import os
import sys
import time
import urllib.parse
import xml.etree.ElementTree as ET

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
ALGORITHM = "AWS4-HMAC-SHA256"


# --------------------------------------------------------------------------
# Signature Version 4


def uri_encode(text, keep_slash):
    # RFC 3986 unreserved characters stay, everything else is %XX with
    # upper-case hex; '/' stays only in the path (S3 does not double-encode).
    safe = "-_.~" + ("/" if keep_slash else "")
    return urllib.parse.quote(text, safe=safe)


def canonical_query(query):
    """query: list of (name, value-or-None).  A bare subresource such as
    '?uploads' is signed as 'uploads='."""
    pairs = sorted((uri_encode(k, False), uri_encode(v or "", False)) for k, v in query)
    return "&".join("%s=%s" % kv for kv in pairs)


def _hmac(key, msg):
    return hmac.new(key, msg.encode("utf-8"), hashlib.sha256).digest()


def signing_key(secret, date, region, service="s3"):
    k_date = _hmac(("AWS4" + secret).encode("utf-8"), date)
    k_region = _hmac(k_date, region)
    k_service = _hmac(k_region, service)
    return _hmac(k_service, "aws4_request")


def authorization(method, path, query, headers, payload_hash, access_key, secret,
                  region, amz_date, service="s3"):
    """Return the Authorization header value.  headers: dict of the headers
    to sign (must include host and x-amz-date); path: not yet encoded."""
    canon = {}
    for name, value in headers.items():
        canon[name.strip().lower()] = " ".join(str(value).split())
    signed_names = sorted(canon)
    canonical_request = "\n".join([
        method,
        uri_encode(path, True),
        canonical_query(query),
        "".join("%s:%s\n" % (n, canon[n]) for n in signed_names),
        ";".join(signed_names),
        payload_hash,
    ])
    date = amz_date[:8]
    scope = "%s/%s/%s/aws4_request" % (date, region, service)
    string_to_sign = "\n".join([
        ALGORITHM, amz_date, scope,
        hashlib.sha256(canonical_request.encode("utf-8")).hexdigest(),
    ])
    signature = hmac.new(signing_key(secret, date, region, service),
                         string_to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    return "%s Credential=%s/%s,SignedHeaders=%s,Signature=%s" % (
        ALGORITHM, access_key, scope, ";".join(signed_names), signature)


def selftest():
    """The GET-object example of the AWS S3 SigV4 documentation."""
    got = authorization(
        "GET", "/test.txt", [],
        {"Host": "examplebucket.s3.amazonaws.com", "Range": "bytes=0-9",
         "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": "20130524T000000Z"},
        EMPTY_SHA256, "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "us-east-1", "20130524T000000Z")
    want = ("AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
            "aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    if got != want:
        raise AssertionError("SigV4 test vector mismatch:\n got  %s\n want %s" % (got, want))
    # query canonicalisation: sorted, bare subresource signed as 'name='
    cq = canonical_query([("uploadId", "a/b c"), ("uploads", None), ("partNumber", "2")])
    if cq != "partNumber=2&uploadId=a%2Fb%20c&uploads=":
        raise AssertionError("canonical query: %s" % cq)


# --------------------------------------------------------------------------
# Client


class S3Error(Exception):
    def __init__(self, method, target, status, body):
        self.status = status
        self.body = body
        self.code = xml_text(body, "Code") or ""
        self.message = xml_text(body, "Message") or ""
        super().__init__("%s %s -> %d %s %s" % (method, target, status, self.code,
                                                 self.message or body[:200]))


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers          # lower-case names
        self.body = body


def xml_root(body):
    try:
        return ET.fromstring(body)
    except ET.ParseError:
        return None


def _local(tag):
    return tag.rsplit("}", 1)[-1]


def xml_text(body, name):
    root = xml_root(body) if isinstance(body, (bytes, str)) and body else None
    if root is None:
        return None
    for el in root.iter():
        if _local(el.tag) == name:
            return el.text
    return None


def xml_children(el, name):
    return [c for c in el if _local(c.tag) == name]


def xml_child_text(el, name, default=None):
    for c in el:
        if _local(c.tag) == name:
            return c.text if c.text is not None else ""
    return default


class S3Client:
    """Path-style S3 requests (http://host:port/bucket/key), signed with
    SigV4 over the SHA-256 of the whole body."""

    def __init__(self, endpoint, access_key, secret_key, region="default", timeout=120):
        url = urllib.parse.urlsplit(endpoint)
        if url.scheme != "http":
            raise ValueError("only http:// endpoints are supported: %s" % endpoint)
        self.host = url.hostname
        self.port = url.port or 80
        self.netloc = url.netloc
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = region
        self.timeout = timeout

    @classmethod
    def from_env_file(cls, path, **kw):
        env = read_env_file(path)
        return cls(env["endpoint"], env["access_key"], env["secret_key"],
                   env.get("region", "default"), **kw)

    def request(self, method, bucket=None, key=None, query=None, body=b"",
                headers=None, sign=True, payload_hash=None):
        """One request; returns a Response whatever the status.  payload_hash
        replaces the body's SHA-256 in the signature (tests of the server's
        payload check)."""
        path = "/"
        if bucket:
            path += bucket
            if key is not None:
                path += "/" + key
        query = list(query or [])
        amz_date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        if payload_hash is None:
            payload_hash = hashlib.sha256(body).hexdigest()
        signed = {"host": self.netloc, "x-amz-date": amz_date,
                  "x-amz-content-sha256": payload_hash}
        for name, value in (headers or {}).items():
            signed[name.lower()] = value
        send = dict(signed)
        if sign:
            send["authorization"] = authorization(
                method, path, query, signed, payload_hash, self.access_key,
                self.secret_key, self.region, amz_date)
        if body or method in ("PUT", "POST"):
            send["content-length"] = str(len(body))
        target = uri_encode(path, True)
        if query:
            target += "?" + "&".join(
                uri_encode(k, False) if v is None else
                "%s=%s" % (uri_encode(k, False), uri_encode(v, False)) for k, v in query)
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for name, value in send.items():
                conn.putheader(name, value)
            conn.endheaders(body if body else None)
            resp = conn.getresponse()
            data = resp.read()
            return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        finally:
            conn.close()

    def _ok(self, method, bucket=None, key=None, query=None, body=b"", headers=None,
            expect=(200,)):
        r = self.request(method, bucket, key, query, body, headers)
        if r.status not in expect:
            target = "/" + (bucket or "") + ("/" + key if key is not None else "")
            raise S3Error(method, target, r.status, r.body)
        return r

    # buckets
    def list_buckets(self):
        r = self._ok("GET")
        root = xml_root(r.body)
        return [xml_child_text(b, "Name") for b in root.iter() if _local(b.tag) == "Bucket"]

    def create_bucket(self, bucket):
        self._ok("PUT", bucket)

    def delete_bucket(self, bucket):
        self._ok("DELETE", bucket, expect=(204,))

    def list_objects(self, bucket, prefix=None):
        """ListObjectsV2, following continuation tokens: [(key, size, etag)]."""
        out, token = [], None
        while True:
            q = [("list-type", "2")]
            if prefix is not None:
                q.append(("prefix", prefix))
            if token:
                q.append(("continuation-token", token))
            root = xml_root(self._ok("GET", bucket, query=q).body)
            for c in xml_children(root, "Contents"):
                out.append((xml_child_text(c, "Key"), int(xml_child_text(c, "Size")),
                            xml_child_text(c, "ETag")))
            if xml_child_text(root, "IsTruncated") != "true":
                return out
            token = xml_child_text(root, "NextContinuationToken")

    # objects
    def put_object(self, bucket, key, data, headers=None):
        return self._ok("PUT", bucket, key, body=data, headers=headers).headers.get("etag")

    def get_object(self, bucket, key, first=None, last=None):
        """Whole object, or bytes first..last inclusive (last None: to the end)."""
        headers = None
        expect = (200,)
        if first is not None:
            headers = {"range": "bytes=%d-%s" % (first, "" if last is None else last)}
            expect = (206,)
        return self._ok("GET", bucket, key, headers=headers, expect=expect).body

    def head_object(self, bucket, key):
        return self._ok("HEAD", bucket, key).headers

    def delete_object(self, bucket, key):
        self._ok("DELETE", bucket, key, expect=(204,))

    # multipart
    def create_multipart_upload(self, bucket, key):
        r = self._ok("POST", bucket, key, query=[("uploads", None)])
        return xml_text(r.body, "UploadId")

    def upload_part(self, bucket, key, upload_id, part_number, data):
        r = self._ok("PUT", bucket, key, body=data,
                     query=[("partNumber", str(part_number)), ("uploadId", upload_id)])
        return r.headers.get("etag")

    def complete_multipart_upload(self, bucket, key, upload_id, parts):
        """parts: [(part_number, etag)] in ascending order."""
        xml = "<CompleteMultipartUpload>%s</CompleteMultipartUpload>" % "".join(
            "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>" % (n, e)
            for n, e in parts)
        r = self._ok("POST", bucket, key, query=[("uploadId", upload_id)],
                     body=xml.encode(), headers={"content-type": "application/xml"})
        # S3 may report a failure inside a 200 response
        root = xml_root(r.body)
        if root is None or _local(root.tag) == "Error":
            raise S3Error("POST", "/%s/%s?uploadId" % (bucket, key), r.status, r.body)
        return xml_child_text(root, "ETag")

    def abort_multipart_upload(self, bucket, key, upload_id):
        self._ok("DELETE", bucket, key, query=[("uploadId", upload_id)], expect=(204,))

    def list_parts(self, bucket, key, upload_id):
        """[(part_number, etag, size)]"""
        root = xml_root(self._ok("GET", bucket, key, query=[("uploadId", upload_id)]).body)
        return [(int(xml_child_text(p, "PartNumber")), xml_child_text(p, "ETag"),
                 int(xml_child_text(p, "Size"))) for p in xml_children(root, "Part")]

    def list_multipart_uploads(self, bucket):
        """[(key, upload_id)] of the uploads in progress."""
        root = xml_root(self._ok("GET", bucket, query=[("uploads", None)]).body)
        return [(xml_child_text(u, "Key"), xml_child_text(u, "UploadId"))
                for u in xml_children(root, "Upload")]


def read_env_file(path):
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            name, value = line.split("=", 1)
            env[name.strip()] = value.strip().strip("'\"")
    return env


def wait_http(endpoint, seconds):
    """Until anything answers HTTP at endpoint (any status)."""
    url = urllib.parse.urlsplit(endpoint)
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=5)
        try:
            conn.request("GET", "/")
            return conn.getresponse().status
        except (OSError, http.client.HTTPException) as e:
            last = e
        finally:
            conn.close()
        time.sleep(0.25)
    raise TimeoutError("no HTTP answer from %s in %ss (last: %s)" % (endpoint, seconds, last))


def check_auth(client):
    """The gateway must accept the right secret and reject a wrong one with
    403 SignatureDoesNotMatch; a gateway that accepts anything would make
    every signing test pass."""
    r = client.request("GET")
    if r.status != 200:
        raise S3Error("GET", "/ (right secret)", r.status, r.body)
    wrong = S3Client("http://" + client.netloc, client.access_key,
                     client.secret_key[::-1] + "x", client.region)
    r = wrong.request("GET")
    code = xml_text(r.body, "Code")
    if r.status != 403 or code != "SignatureDoesNotMatch":
        raise S3Error("GET", "/ (wrong secret: want 403 SignatureDoesNotMatch)",
                      r.status, r.body)
    # and an anonymous write is refused (it would create a bucket otherwise)
    unsigned = client.request("PUT", "s3check-unsigned-probe", sign=False)
    if unsigned.status != 403:
        raise S3Error("PUT", "/s3check-unsigned-probe (anonymous: want 403)",
                      unsigned.status, unsigned.body)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", help="key=value file written by radosgw.sh start")
    ap.add_argument("--endpoint", default=os.environ.get("S3_ENDPOINT"))
    ap.add_argument("--access-key", default=os.environ.get("S3_ACCESS_KEY"))
    ap.add_argument("--secret-key", default=os.environ.get("S3_SECRET_KEY"))
    ap.add_argument("--region", default=os.environ.get("S3_REGION", "default"))
    ap.add_argument("command", choices=["selftest", "wait", "check-auth", "ls", "mb",
                                        "rb", "put", "get", "rm"])
    ap.add_argument("args", nargs="*")
    a = ap.parse_args(argv)

    if a.command == "selftest":
        selftest()
        print("selftest: SigV4 test vector ok")
        return 0
    if a.env:
        env = read_env_file(a.env)
        a.endpoint = a.endpoint or env.get("endpoint")
        a.access_key = a.access_key or env.get("access_key")
        a.secret_key = a.secret_key or env.get("secret_key")
        a.region = env.get("region", a.region)
    if not a.endpoint:
        ap.error("no endpoint (--env or --endpoint)")
    if a.command == "wait":
        wait_http(a.endpoint, float(a.args[0]) if a.args else 60)
        return 0
    if not (a.access_key and a.secret_key):
        ap.error("no credentials (--env or --access-key/--secret-key)")
    c = S3Client(a.endpoint, a.access_key, a.secret_key, a.region)
    try:
        if a.command == "check-auth":
            check_auth(c)
            print("check-auth: right secret 200, wrong secret 403 SignatureDoesNotMatch")
        elif a.command == "ls" and not a.args:
            for b in c.list_buckets():
                print(b)
        elif a.command == "ls":
            for k, size, _ in c.list_objects(a.args[0]):
                print("%12d %s" % (size, k))
        elif a.command == "mb":
            c.create_bucket(a.args[0])
        elif a.command == "rb":
            c.delete_bucket(a.args[0])
        elif a.command == "put":
            with open(a.args[2], "rb") as f:
                print(c.put_object(a.args[0], a.args[1], f.read()))
        elif a.command == "get":
            data = c.get_object(a.args[0], a.args[1])
            with open(a.args[2], "wb") as f:
                f.write(data)
        elif a.command == "rm":
            c.delete_object(a.args[0], a.args[1])
    except (S3Error, OSError, http.client.HTTPException) as e:
        print("s3check %s: %s" % (a.command, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
