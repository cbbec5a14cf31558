"""Object keys a real server must refuse, and a full disk (docs/api.md, "Objects"):
a key with a NUL or another control byte is refused whole (decoded, a%00b would be
stored as a), a key under an object or above objects is a conflict that names the
other key, and an upload the state directory has no room for is answered 507 with
what to do, whether the upload itself or its copy into the store runs out of room."""
import http.client
import json
import os

from harness import cluster, run_tests


def put(c, key, data=b"x"):
    """(status, the error's message or the answer) of a PUT of a raw path: the key is
    sent exactly as given (urllib would quote it)."""
    host, port = c.url.split("://", 1)[1].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("PUT", "/v1/objects/" + key, body=data,
                     headers={"Authorization": "Bearer " + c.token,
                              "Content-Type": "application/octet-stream"})
        r = conn.getresponse()
        body = json.loads(r.read() or b"null")
    finally:
        conn.close()
    if r.status >= 400:
        return r.status, body["error"]["message"]
    return r.status, body


def test_control_bytes_in_a_key_are_refused():
    with cluster(agents=0, name="objkeys") as c:
        status, msg = put(c, "a%00b")
        assert status == 400, (status, msg)
        assert "object key 'a%00b'" in msg and "NUL" in msg, msg
        status, msg = put(c, "ckpt/x%0Ay")
        assert status == 400 and "'ckpt/x%0Ay'" in msg and "control byte" in msg, msg
        # nothing was stored under the part before the NUL
        status, msg = put(c, "a")
        assert status == 200, (status, msg)
        got = c.api("GET", "/v1/objects/a?stat=1")
        assert got["size"] == 1, got
        # an escape of a printable byte is still decoded: %2D is '-'
        status, got = put(c, "ok%2Dkey")
        assert status == 200 and got["key"] == "ok-key", (status, got)


def test_a_key_under_an_object_or_above_objects_conflicts():
    with cluster(agents=0, name="objprefix") as c:
        assert put(c, "a", b"one")[0] == 200
        status, msg = put(c, "a/b", b"two")
        assert status == 409, (status, msg)
        assert "'a/b'" in msg and "under the existing object 'a'" in msg, msg
        assert put(c, "x/y", b"three")[0] == 200
        status, msg = put(c, "x", b"four")
        assert status == 409, (status, msg)
        assert "'x'" in msg and "prefix of the objects under 'x/'" in msg, msg
        # both first objects are as they were
        assert c.api("GET", "/v1/objects/a") == b"one"
        assert c.api("GET", "/v1/objects/x/y") == b"three"


def test_an_upload_without_room_is_507():
    with cluster(agents=0, name="objfull", state_tmpfs="4m") as c:
        # no room for the upload itself
        c.fill_state_disk()
        status, msg = put(c, "small", b"x" * 200000)
        assert status == 507, (status, msg)
        assert "no space" in msg.lower(), msg
        c.free_state_disk()
        assert put(c, "small", b"x" * 200000)[0] == 200
        # room for the upload, not for its copy into the store
        status, msg = put(c, "big", os.urandom(2500 * 1024))
        assert status == 507, (status, msg)
        assert "object big: cannot store it: no space left" in msg, msg


run_tests([test_control_bytes_in_a_key_are_refused,
           test_a_key_under_an_object_or_above_objects_conflicts,
           test_an_upload_without_room_is_507])
