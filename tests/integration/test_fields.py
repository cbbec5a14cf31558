"""A job field described by one entry of the field table (src/model/fields.c):
the test build's `probe`, set with `anvil run --field probe=VALUE`, is shown
by `anvil show --json`, is the same after the server restarts (it is stored),
and reaches the rank as ANVIL_PROBE. `--field` sets any field a client may
set by its name, and refuses one that is not, naming the field, the value
and why."""
import json

from harness import cluster, run_tests


def show(c, jid):
    return json.loads(c.cli("show", "--json", str(jid), check=True).stdout)["job"]


def test_field_option_sets_fields_and_refuses_others():
    with cluster(agents=1, gpus=1, name="fieldopt") as c:
        # a field with an option of its own, set by its name instead
        # (docs/cli.md: anvil run --field grace_ms=2500 --field checkpointing=true -- ...)
        p = c.cli("run", "--json", "--grace", "1s", "--field", "grace_ms=2500", "--field",
                  "checkpointing=true", "--", "true")
        assert p.returncode == 0, (p.stdout, p.stderr)
        j = show(c, json.loads(p.stdout)["job"]["id"])
        assert j["grace_ms"] == 2500 and j["checkpointing"] is True, j
        # an object, as JSON: sent as one (no node has the label)
        p = c.cli("run", "--field", 'selectors={"disk": "nvme"}', "--", "true")
        assert p.returncode != 0, p.stdout
        assert 'the job asks for {"selectors":{"disk":"nvme"}}' in p.stderr, p.stderr
        for arg, words in (
                ("nosuch=1", "--field nosuch=1: 'nosuch' is not a field of a job"),
                ("submit_ms=5", "'submit_ms' is a field of the job that only the server sets"),
                ("grace_ms=soon", "--field grace_ms=soon: 'soon' is not an integer"),
                ("selectors=disk", "'disk' is not a JSON object")):
            p = c.cli("run", "--field", arg, "--", "true")
            assert p.returncode != 0, (arg, p.stdout)
            assert words in p.stderr, (arg, p.stderr)
        # the bounds are the server's, in the words of any body's check
        p = c.cli("run", "--field", "grace_ms=999999999", "--", "true")
        assert p.returncode != 0 and "field 'grace_ms'" in p.stderr, p.stderr


def test_probe_field_is_stored_shown_and_reaches_the_rank():
    with cluster(agents=1, gpus=1, name="fieldprobe") as c:
        p = c.cli("run", "--json", "--field", "probe=p-4711", "--", "sh", "-c",
                  'echo "probe=[$ANVIL_PROBE]"')
        assert p.returncode == 0, (p.stdout, p.stderr)
        jid = json.loads(p.stdout)["job"]["id"]
        assert show(c, jid)["probe"] == "p-4711"
        done = c.wait_job(jid)
        assert done["state"] == "succeeded", done
        # the store's round trip: a restarted server shows it the same
        c.kill_server()
        c.start_server()
        assert show(c, jid)["probe"] == "p-4711"
        plain = c.submit(["true"], gpus=1)
        assert "probe" not in show(c, plain["id"]), "an unset probe is not shown"
        # last: the rank's environment (the agent reads "probe" from its
        # desired entry into ANVIL_PROBE)
        logs = c.cli("logs", str(jid), check=True).stdout
        assert "probe=[p-4711]" in logs, logs


if __name__ == "__main__":
    run_tests([
        test_field_option_sets_fields_and_refuses_others,
        test_probe_field_is_stored_shown_and_reaches_the_rank,
    ])
