"""The console's roles as groups, each with the model permissions that match what it may do
(see ``recovery_console.roles``). Frozen here: a later change of roles is a new migration."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

READ = {
    "recovery_console": [
        "view_cluster",
        "view_workload",
        "view_attempt",
        "view_node",
        "view_auditentry",
        "view_review",
        "view_modechangerequest",
        "view_notificationchannel",
    ],
    "detection": ["view_anomaly", "view_sourcecursor", "view_detectionsettings"],
    "remediation": ["view_advice", "view_nodehealth", "view_milestone"],
}
GRANTS = {
    "viewer": {},
    "operator": {
        "recovery_console": ["change_cluster", "add_modechangerequest", "return_to_monitor"],
        "detection": ["change_detectionsettings"],
        "remediation": ["change_nodehealth"],
    },
    "reviewer": {"recovery_console": ["add_review", "change_review"]},
    "approver": {"recovery_console": ["approve_modechangerequest"]},
}
ADMIN_APPS = ("recovery_console", "detection", "remediation")


def _ensure_permissions(apps):
    # Permissions are normally created after all migrations ran; this one needs them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None


def create_groups(apps, schema_editor):
    _ensure_permissions(apps)
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")

    def permissions(grants):
        found = []
        for app_label, codenames in grants.items():
            found += Permission.objects.filter(
                content_type__app_label=app_label, codename__in=codenames
            )
        return found

    for role, extra in GRANTS.items():
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.add(*permissions(READ), *permissions(extra))
    admin, _ = Group.objects.get_or_create(name="admin")
    admin.permissions.add(*Permission.objects.filter(content_type__app_label__in=ADMIN_APPS))


def remove_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(
        name__in=[*GRANTS, "admin"]
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("recovery_console", "0004_reviews_mode_requests_notifications"),
        ("detection", "0002_dispatch_cycles_every_second"),
        ("remediation", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]
    operations = [migrations.RunPython(create_groups, remove_groups)]
