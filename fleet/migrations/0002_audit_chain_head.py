from django.db import migrations


def create_head(apps, schema_editor):
    apps.get_model("recovery_console", "AuditChainHead").objects.get_or_create(pk=1)


class Migration(migrations.Migration):
    dependencies = [("recovery_console", "0001_initial")]
    operations = [migrations.RunPython(create_head, migrations.RunPython.noop)]
