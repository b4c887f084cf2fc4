"""Options shared by run_controller and run_watchdog."""

from typing import Any

from django.core.management.base import CommandError, CommandParser

from recovery_console.fleet.models import Cluster
from remediation.controller.factory import http_advisor_from, slurm_from
from remediation.controller.reconciler import Advisor
from remediation.controller.slurm import SlurmClient
from remediation.local_advisor import LocalAdvisor, controller_token_for


def add_connection_arguments(parser: CommandParser) -> None:
    parser.add_argument("--cluster", required=True, help="the cluster's name in the console")
    parser.add_argument("--ssh", help="run Slurm commands over SSH on user@host")
    parser.add_argument("--ssh-port", type=int, default=22)
    parser.add_argument("--identity", help="the SSH private key (default ~/.ssh/id_ed25519)")
    parser.add_argument("--known-hosts", help="known_hosts to check the host key against")
    parser.add_argument("--slurm-conf", help="SLURM_CONF for the Slurm commands")
    parser.add_argument("--url", help="the console's base URL (default: this process's database)")
    parser.add_argument("--token-file", help="a file holding the controller token (with --url)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between cycles")
    parser.add_argument("--once", action="store_true", help="one cycle, then exit")


def connect(options: dict[str, Any], token_name: str) -> tuple[Cluster, Advisor, SlurmClient]:
    try:
        cluster = Cluster.objects.get(name=options["cluster"])
    except Cluster.DoesNotExist as exc:
        raise CommandError(f"no cluster named {options['cluster']!r}") from exc
    # The simulated cluster has no Slurm to reach; run_demo drives its controller in-process.
    if cluster.backend != "slurm":
        raise CommandError(
            f"cluster {cluster.name} is {cluster.backend}: its controller runs inside run_demo"
        )
    advisor = http_advisor_from(options, cluster.name)
    if options.get("url") and not options.get("token_file"):
        raise CommandError("--url needs --token-file")
    # Without --url, the same services are called on this process's database, with no HTTP.
    local = LocalAdvisor(controller_token_for(cluster, token_name))
    return cluster, advisor or local, slurm_from(options)
