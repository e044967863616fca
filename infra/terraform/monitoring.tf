# What an operator sees in Cloud Monitoring: log-based metrics on the control plane's structured
# events (shared/rlpipe/control/run_metrics.py writes them; tests/control/lifecycle/test_monitoring.py checks that
# every jsonPayload field read here is one those lines carry), a dashboard with a widget per
# metric, and one alert policy on failed, gated and stuck runs. docs/monitoring.md.
#
# Argument names follow the google provider's documentation:
#   google_logging_metric           https://registry.terraform.io/providers/hashicorp/google/latest/docs/resources/logging_metric
#                                   (metric_descriptor.labels, label_extractors, value_extractor, bucket_options.explicit_buckets)
#   google_monitoring_dashboard     https://registry.terraform.io/providers/hashicorp/google/latest/docs/resources/monitoring_dashboard
#                                   (dashboard_json: https://cloud.google.com/monitoring/api/ref_v3/rest/v1/projects.dashboards;
#                                   gridLayout, xyChart.dataSets[].timeSeriesQuery.timeSeriesFilter, logsPanel.filter/resourceNames:
#                                   https://cloud.google.com/monitoring/dashboards/api-dashboard)
#   google_monitoring_alert_policy  https://registry.terraform.io/providers/hashicorp/google/latest/docs/resources/monitoring_alert_policy
#                                   (condition_matched_log needs alert_strategy.notification_rate_limit; each combination
#                                   of extracted labels, here one per run, notifies separately; the documentation
#                                   reads them as $${log.extracted_label.<key>})
# Where the lines land: a 2nd-gen function runs as a Cloud Run service of the same name, so its
# stdout is logged with resource.type="cloud_run_revision" and resource.labels.service_name = the
# function's name (googleapis/google-cloud-go#6367); one JSON object per line becomes jsonPayload,
# with severity and time lifted into the entry (https://cloud.google.com/logging/docs/structured-logging).
# Filters use the Logging query language (https://cloud.google.com/logging/docs/view/logging-query-language;
# JSON null is NULL_VALUE: https://cloud.google.com/logging/docs/view/troubleshoot-lql).

variable "alert_notification_channels" {
  description = "Notification channels the run alert policy notifies (projects/<project>/notificationChannels/<id>; create them in Cloud Monitoring or with google_monitoring_notification_channel). Empty (the default): the policy is still created and opens incidents in Cloud Monitoring, but notifies nobody."
  type        = list(string)
  default     = []
}

locals {
  # The Cloud Run services the functions run as: functions.tf names each "<name_prefix>-<key>".
  monitored_services = [for k in sort(keys(local.functions)) : "${var.name_prefix}-${k}"]
  control_plane_logs = "resource.type=\"cloud_run_revision\" AND resource.labels.service_name=(${join(" OR ", [for s in local.monitored_services : "\"${s}\""])})"

  # Metric id -> what it counts. Each metric reads the lines of one event (jsonPayload.event),
  # optionally narrowed by `where`; every label is extracted from the jsonPayload field of the
  # same name. `value` names the field a distribution records ("" for a counter).
  run_metrics = {
    runs_started = {
      display_name = "Runs started"
      description  = "Runs claimed by intake and handed to their workflow execution."
      event        = "run_started"
      where        = ""
      labels = {
        source_kind = "Where the request came from: gcs, pubsub, upstream or cli."
        team        = "The run's team (core/teams.py; default on a deployment without teams)."
      }
      value  = ""
      unit   = "1"
      bounds = []
    }
    runs_ended = {
      display_name = "Runs ended"
      description  = "Runs that reached their end (the first end only: a later end after a retry or a promotion is counted in Rounds ended), by outcome and failure class. A run that failed because a retry budget ran out has the class of its last failure."
      event        = "run_ended"
      where        = ""
      labels = {
        outcome          = "succeeded, failed, cancelled, gated or stopped (early, by its sweep)."
        failure_class    = "preempted, capacity, transient, resources or permanent; empty when the run did not fail."
        budget_exhausted = "true when the run failed because a retry budget (or the retry cap) ran out."
        team             = "The run's team (core/teams.py; default on a deployment without teams)."
      }
      value  = ""
      unit   = "1"
      bounds = []
    }
    rounds_ended = {
      display_name = "Rounds ended"
      description  = "Later ends of runs that had ended before: a retried round's, or a promoted run's after its gate."
      event        = "round_ended"
      where        = ""
      labels = {
        outcome          = "succeeded, failed, cancelled, gated or stopped (early, by its sweep)."
        failure_class    = "preempted, capacity, transient, resources or permanent; empty when the round did not fail."
        budget_exhausted = "true when the round failed because a retry budget (or the retry cap) ran out."
        team             = "The run's team (core/teams.py; default on a deployment without teams)."
      }
      value  = ""
      unit   = "1"
      bounds = []
    }
    gate_outcomes = {
      display_name = "Quality gate outcomes"
      description  = "Ended runs whose quality gate was evaluated: passed, failed or overridden."
      event        = "run_ended"
      where        = "NOT jsonPayload.gate=\"none\""
      labels       = { gate = "passed, failed or overridden." }
      value        = ""
      unit         = "1"
      bounds       = []
    }
    runs_stuck = {
      display_name = "Runs stuck"
      description  = "Runs the reconciler found making no progress."
      event        = "run_stuck"
      where        = ""
      labels       = { stage = "The stage the run is stuck in." }
      value        = ""
      unit         = "1"
      bounds       = []
    }
    stage_durations = {
      display_name = "Stage attempt durations"
      description  = "Seconds from an attempt's launch to its end, by stage and final phase."
      event        = "stage_ended"
      where        = ""
      labels = {
        stage = "convert, train or export."
        phase = "succeeded, failed, superseded or cancelled."
      }
      value  = "duration_seconds"
      unit   = "s"
      bounds = [60, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 57600, 86400, 172800, 345600]
    }
    stage_chip_hours = {
      display_name = "Stage attempt TPU chip-hours"
      description  = "TPU chip-hours an attempt's pods held, by stage, final phase and team."
      event        = "stage_ended"
      where        = "NOT jsonPayload.chip_hours=NULL_VALUE"
      labels = {
        stage = "convert, train or export."
        phase = "succeeded, failed, superseded or cancelled."
        team  = "The run's team (core/teams.py; default on a deployment without teams)."
      }
      value  = "chip_hours"
      unit   = "h"
      bounds = [1, 4, 16, 64, 256, 1024, 4096, 16384]
    }
    post_mean_reward = {
      display_name = "Post-training mean reward"
      description  = "The mean reward of the trained model's evaluation, per ended run that has one."
      event        = "run_ended"
      where        = "NOT jsonPayload.post_mean_reward=NULL_VALUE"
      labels       = { outcome = "succeeded, failed, cancelled, gated or stopped (early, by its sweep)." }
      value        = "post_mean_reward"
      unit         = "1"
      bounds       = [-1, 0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.5, 2, 3, 5, 10]
    }
  }

  # What the alert policy fires on: a run that failed or was gated, or one that is stuck.
  runs_needing_attention = "${local.control_plane_logs} AND (((jsonPayload.event=\"run_ended\" OR jsonPayload.event=\"round_ended\") AND jsonPayload.outcome=(\"failed\" OR \"gated\")) OR jsonPayload.event=\"run_stuck\")"
}

resource "google_project_service" "monitoring" {
  count = var.enable_apis ? 1 : 0

  project            = var.project_id
  service            = "monitoring.googleapis.com"
  disable_on_destroy = false
}

resource "google_logging_metric" "run" {
  for_each = local.run_metrics

  project     = var.project_id
  name        = "${var.name_prefix}/${each.key}"
  description = each.value.description
  filter      = "${local.control_plane_logs} AND jsonPayload.event=\"${each.value.event}\"${each.value.where == "" ? "" : " AND ${each.value.where}"}"

  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = each.value.value == "" ? "INT64" : "DISTRIBUTION"
    unit         = each.value.unit
    display_name = each.value.display_name

    dynamic "labels" {
      for_each = each.value.labels
      content {
        key         = labels.key
        value_type  = "STRING"
        description = labels.value
      }
    }
  }

  label_extractors = { for field, _ in each.value.labels : field => "EXTRACT(jsonPayload.${field})" }
  value_extractor  = each.value.value == "" ? null : "EXTRACT(jsonPayload.${each.value.value})"

  dynamic "bucket_options" {
    for_each = each.value.value == "" ? [] : [each.value.bounds]
    content {
      explicit_buckets {
        bounds = bucket_options.value
      }
    }
  }

  depends_on = [google_project_service.apis]
}

locals {
  metric_filter = { for k, _ in local.run_metrics : k => "metric.type=\"logging.googleapis.com/user/${google_logging_metric.run[k].name}\" resource.type=\"cloud_run_revision\"" }

  counter_widgets = [
    for k, m in local.run_metrics : {
      title = m.display_name
      xyChart = {
        dataSets = [{
          timeSeriesQuery = {
            timeSeriesFilter = {
              filter = local.metric_filter[k]
              aggregation = {
                alignmentPeriod    = "3600s"
                perSeriesAligner   = "ALIGN_SUM"
                crossSeriesReducer = "REDUCE_SUM"
                groupByFields      = [for label in keys(m.labels) : "metric.label.\"${label}\""]
              }
            }
          }
          plotType   = "STACKED_BAR"
          targetAxis = "Y1"
        }]
        yAxis = { label = "per hour", scale = "LINEAR" }
      }
    } if m.value == ""
  ]

  distribution_widgets = [
    for k, m in local.run_metrics : {
      title = "${m.display_name} (p50, p95)"
      xyChart = {
        dataSets = [for reducer, name in { REDUCE_PERCENTILE_50 = "p50", REDUCE_PERCENTILE_95 = "p95" } : {
          # "p50 train succeeded": which percentile, and the series' labels
          # (https://cloud.google.com/monitoring/api/ref_v3/rest/v1/projects.dashboards#DataSet, legendTemplate)
          legendTemplate = join(" ", concat([name], [for label in keys(m.labels) : "$${metric.labels.${label}}"]))
          timeSeriesQuery = {
            timeSeriesFilter = {
              filter = local.metric_filter[k]
              aggregation = {
                alignmentPeriod    = "3600s"
                perSeriesAligner   = "ALIGN_DELTA"
                crossSeriesReducer = reducer
                groupByFields      = [for label in keys(m.labels) : "metric.label.\"${label}\""]
              }
            }
          }
          plotType   = "LINE"
          targetAxis = "Y1"
        }]
        yAxis = { label = m.unit, scale = "LINEAR" }
      }
    } if m.value != ""
  ]

  # Runs and TPU chip-hours by team (docs/teams-limits.md, "Cost and visibility"). A label added
  # to a metric that exists is allowed (LogMetric.metricDescriptor: "New labels can be added ...,
  # but existing labels cannot be modified", https://cloud.google.com/logging/docs/reference/v2/rest/v2/projects.metrics).
  # The chip-hours are a distribution, whose values only PromQL sums: a distribution metric reads as
  # a Prometheus histogram, its values' total as <name>_sum, the name mapped by
  # https://cloud.google.com/monitoring/promql/promql-mapping (first "/" to ":", any other
  # character outside [A-Za-z0-9_] to "_").
  chip_hours_promql = "logging_googleapis_com:user_${replace(google_logging_metric.run["stage_chip_hours"].name, "/[^A-Za-z0-9_]/", "_")}_sum"
  team_widgets = [
    {
      title = "TPU chip-hours by team"
      xyChart = {
        dataSets = [{
          timeSeriesQuery = {
            prometheusQuery = "sum by (team) (increase(${local.chip_hours_promql}{monitored_resource=\"cloud_run_revision\"}[1h]))"
          }
          plotType   = "STACKED_BAR"
          targetAxis = "Y1"
        }]
        yAxis = { label = "chip-hours per hour", scale = "LINEAR" }
      }
    },
    {
      title = "Runs ended by team"
      xyChart = {
        dataSets = [{
          legendTemplate = "$${metric.labels.team} $${metric.labels.outcome}"
          timeSeriesQuery = {
            timeSeriesFilter = {
              filter = local.metric_filter["runs_ended"]
              aggregation = {
                alignmentPeriod    = "3600s"
                perSeriesAligner   = "ALIGN_SUM"
                crossSeriesReducer = "REDUCE_SUM"
                groupByFields      = ["metric.label.\"team\"", "metric.label.\"outcome\""]
              }
            }
          }
          plotType   = "STACKED_BAR"
          targetAxis = "Y1"
        }]
        yAxis = { label = "per hour", scale = "LINEAR" }
      }
    },
    {
      title = "Runs started by team"
      xyChart = {
        dataSets = [{
          legendTemplate = "$${metric.labels.team}"
          timeSeriesQuery = {
            timeSeriesFilter = {
              filter = local.metric_filter["runs_started"]
              aggregation = {
                alignmentPeriod    = "3600s"
                perSeriesAligner   = "ALIGN_SUM"
                crossSeriesReducer = "REDUCE_SUM"
                groupByFields      = ["metric.label.\"team\""]
              }
            }
          }
          plotType   = "STACKED_BAR"
          targetAxis = "Y1"
        }]
        yAxis = { label = "per hour", scale = "LINEAR" }
      }
    },
  ]

  attention_panel = {
    title = "Runs that failed, were gated or are stuck"
    logsPanel = {
      filter        = local.runs_needing_attention
      resourceNames = ["projects/${var.project_id}"]
    }
  }
}

resource "google_monitoring_dashboard" "runs" {
  project = var.project_id
  dashboard_json = jsonencode({
    displayName = "${var.name_prefix}: runs"
    gridLayout = {
      columns = "2"
      widgets = concat(local.team_widgets, local.counter_widgets, local.distribution_widgets, [local.attention_panel])
    }
  })

  depends_on = [google_project_service.monitoring]
}

resource "google_monitoring_alert_policy" "runs_need_attention" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: a run failed, was gated or is stuck"
  combiner              = "OR"
  enabled               = true
  notification_channels = var.alert_notification_channels # [] = incidents only, nobody notified

  conditions {
    display_name = "run_ended or round_ended (failed or gated) or run_stuck"
    condition_matched_log {
      filter = local.runs_needing_attention
      label_extractors = {
        run_id        = "EXTRACT(jsonPayload.run_id)"
        event         = "EXTRACT(jsonPayload.event)"
        stage         = "EXTRACT(jsonPayload.stage)"
        outcome       = "EXTRACT(jsonPayload.outcome)"
        failure_class = "EXTRACT(jsonPayload.failure_class)"
      }
    }
  }

  alert_strategy {
    notification_rate_limit {
      period = "300s"
    }
    auto_close = "1800s"
  }

  documentation {
    mime_type = "text/markdown"
    content   = <<-EOT
      Run **$${log.extracted_label.run_id}**: $${log.extracted_label.event} (outcome $${log.extracted_label.outcome}, failure class $${log.extracted_label.failure_class}) in stage $${log.extracted_label.stage}.

      `rlpipe status $${log.extracted_label.run_id}` prints the run's state, its failure and links to its workflow execution, workload logs and artifacts (docs/monitoring.md).
    EOT
  }

  depends_on = [google_project_service.monitoring]
}
