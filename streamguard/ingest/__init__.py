"""Ingest from the MQTT sensor ecosystem (issue 10): mappings from zigbee2mqtt, Tasmota, ESPHome,
Shelly Gen2, Home Assistant statestream and rtl_433 payloads to a stream's readings (:mod:`.spec`,
:mod:`.presets`, :mod:`.mapping`), the fixed-rate resampler (:mod:`.resampler`, :mod:`.grid`), the
steps recorder for calibration (:mod:`.recorder`) and the per-stream glue the daemon drives
(:mod:`.stream`). Nothing here logs a reading."""
