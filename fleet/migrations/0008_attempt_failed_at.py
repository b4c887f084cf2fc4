"""Each attempt keeps the earliest evidence of its failure, so time to resume can be measured
from the failure without this floor reading detection's anomalies. Filled in for the attempts
already recorded, from their anomalies."""

from django.db import migrations, models
from django.db.models import Min


def fill_in(apps, schema_editor):
    Attempt = apps.get_model("recovery_console", "Attempt")
    Anomaly = apps.get_model("detection", "Anomaly")
    earliest = Anomaly.objects.values("attempt").annotate(at=Min("first_evidence_at"))
    for row in earliest.iterator():
        Attempt.objects.filter(pk=row["attempt"]).update(failed_at=row["at"])


class Migration(migrations.Migration):
    dependencies = [
        ("recovery_console", "0007_console_models_moved"),
        ("detection", "0002_dispatch_cycles_every_second"),
    ]

    operations = [
        migrations.AddField(
            model_name="attempt",
            name="failed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(fill_in, migrations.RunPython.noop),
    ]
