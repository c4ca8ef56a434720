"""sdk-py: a plugin written with the Python SDK (sdk/python/tenure.py) as its docs show.

Every INTERVAL_MS (default 100) it requests TARGET_URL, with ``urllib.request.urlopen``
(through the SDK's handler) when VIA is "urllib", else with the SDK's requests-like
``tenure.http.get``, and logs ``request seq={n} status={code}``; it returns when
``tenure.sleep`` says a stop was requested, logging ``stop requested: returning``. A
failed request ends ``start`` with the error's message. ``cleanup`` logs
``cleanup reason={reason} fresh_instance={bool}``.
"""

import urllib.request

import tenure
import wit_world

tenure.install_urllib()

# Set at the top of `start`: false in `cleanup` means it runs on a fresh instance.
started = False


class WitWorld(tenure.Task, wit_world.WitWorld):
    def run(self, lease):
        global started
        started = True
        tenure.log("info", f"start token={lease.token}")
        url = tenure.env("TARGET_URL")
        interval = int(tenure.env("INTERVAL_MS", "100")) / 1000
        via_urllib = tenure.env("VIA") == "urllib"
        seq = 0
        while True:
            seq += 1
            if via_urllib:
                with urllib.request.urlopen(url) as response:
                    status = response.status
            else:
                status = tenure.http.get(url).status
            tenure.log("info", f"request seq={seq} status={status}")
            if tenure.sleep(interval):
                tenure.log("info", "stop requested: returning")
                return

    def on_cleanup(self, reason):
        name = tenure.reason_name(reason)
        fresh = "true" if not started else "false"
        tenure.log("info", f"cleanup reason={name} fresh_instance={fresh}")
