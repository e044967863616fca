# The buckets of docs/design.md#the-gcs-layout and the bucket that holds the functions' source archive. The artifacts
# bucket holds what workloads write; the state bucket the control plane's own records (ledgers,
# events, error records, READY.json, upstream state, the reconcile cursor), which no workload may
# touch (iam.tf; core/layout.py names which object lives where).

resource "google_storage_bucket" "requests" {
  #checkov:skip=CKV_GCP_62:Access is audited with Cloud Audit Logs (enable Data Access logs for storage.googleapis.com if needed); legacy usage logs would need a log bucket of their own.
  project                     = var.project_id
  name                        = local.requests_bucket
  location                    = upper(var.region)
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = var.force_destroy_buckets

  # A request file is the record of what was asked; an overwrite or delete keeps the old version.
  versioning {
    enabled = true
  }

  lifecycle_rule {
    condition {
      days_since_noncurrent_time = var.requests_noncurrent_days
      with_state                 = "ARCHIVED"
    }
    action {
      type = "Delete"
    }
  }

  lifecycle_rule {
    condition {
      age = 1
    }
    action {
      type = "AbortIncompleteMultipartUpload"
    }
  }

  depends_on = [google_project_service.apis]
}

resource "google_storage_bucket" "artifacts" {
  #checkov:skip=CKV_GCP_62:Access is audited with Cloud Audit Logs (enable Data Access logs for storage.googleapis.com if needed); legacy usage logs would need a log bucket of their own.
  #checkov:skip=CKV_GCP_78:Checkpoints of hundreds of GB are written once and deleted by lifecycle rules; versioning would keep every deleted one. The control plane's records are in the versioned state bucket.
  project                     = var.project_id
  name                        = local.artifacts_bucket
  location                    = upper(var.region)
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = var.force_destroy_buckets

  soft_delete_policy {
    retention_duration_seconds = var.artifacts_soft_delete_seconds
  }

  dynamic "lifecycle_rule" {
    for_each = var.artifact_lifecycle_rules
    content {
      condition {
        age            = lifecycle_rule.value.age_days
        matches_prefix = lifecycle_rule.value.prefixes
        matches_suffix = lifecycle_rule.value.suffixes
      }
      action {
        type = "Delete"
      }
    }
  }

  dynamic "lifecycle_rule" {
    for_each = var.runs_retention_days == null ? [] : [var.runs_retention_days]
    content {
      condition {
        age            = lifecycle_rule.value
        matches_prefix = ["runs/"]
      }
      action {
        type = "Delete"
      }
    }
  }

  lifecycle_rule {
    condition {
      age = 1
    }
    action {
      type = "AbortIncompleteMultipartUpload"
    }
  }

  depends_on = [google_project_service.apis]
}

resource "google_storage_bucket" "state" {
  #checkov:skip=CKV_GCP_62:Access is audited with Cloud Audit Logs (enable Data Access logs for storage.googleapis.com if needed); legacy usage logs would need a log bucket of their own.
  project                     = var.project_id
  name                        = local.state_bucket
  location                    = upper(var.region)
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = var.force_destroy_buckets

  # Small JSON records written with generation preconditions; every overwrite or delete keeps the
  # old version for state_noncurrent_days, so a bad write by the control plane can be undone.
  versioning {
    enabled = true
  }

  lifecycle_rule {
    condition {
      days_since_noncurrent_time = var.state_noncurrent_days
      with_state                 = "ARCHIVED"
    }
    action {
      type = "Delete"
    }
  }

  # A conversion cache marker expires before the attempt directory it names (artifacts bucket).
  lifecycle_rule {
    condition {
      age            = var.conversion_ready_days
      matches_prefix = ["cache/maxtext/"]
      matches_suffix = ["/READY.json"]
    }
    action {
      type = "Delete"
    }
  }

  dynamic "lifecycle_rule" {
    for_each = var.runs_retention_days == null ? [] : [var.runs_retention_days]
    content {
      condition {
        age            = lifecycle_rule.value
        matches_prefix = ["runs/"]
      }
      action {
        type = "Delete"
      }
    }
  }

  lifecycle_rule {
    condition {
      age = 1
    }
    action {
      type = "AbortIncompleteMultipartUpload"
    }
  }

  depends_on = [google_project_service.apis]
}

resource "google_storage_bucket" "source" {
  #checkov:skip=CKV_GCP_62:Access is audited with Cloud Audit Logs (enable Data Access logs for storage.googleapis.com if needed); legacy usage logs would need a log bucket of their own.
  #checkov:skip=CKV_GCP_78:Objects are named by their MD5 and never overwritten; `make bundle` + apply recreates them.
  project                     = var.project_id
  name                        = local.source_bucket
  location                    = upper(var.region)
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = true # only build inputs live here

  depends_on = [google_project_service.apis]
}

# The archive from `make bundle`; its name carries its MD5, so new code means a new object and a
# rebuild of the functions, and unchanged code means no change at all.
resource "google_storage_bucket_object" "source" {
  name         = "functions/source-${try(filemd5(local.source_zip), "missing")}.zip"
  bucket       = google_storage_bucket.source.name
  source       = local.source_zip
  content_type = "application/zip"

  lifecycle {
    precondition {
      condition     = fileexists(local.source_zip)
      error_message = "The functions' source archive is missing: run `make bundle` (infra/bundle.sh) first."
    }
  }
}
