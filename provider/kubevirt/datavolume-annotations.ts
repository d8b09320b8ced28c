// The contract between the DataVolume controller (cluster side,
// provider/controllers/datavolumes/) and the node agent's import (node side):
// annotations on the DataVolume's PersistentVolumeClaim, with CDI's own names
// where CDI has one (kubevirt.io/containerized-data-importer,
// pkg/controller/common), so tools that read CDI's claims read these too.
//
// The controller writes the source when it creates the claim; the node agent
// imports it into the volume when it publishes the claim for a VM, and reports
// on the claim; the controller mirrors the report into the DataVolume's
// status (its one writer). Nothing else writes these.

/** What to import: `http`, `registry`, or `none` (blank: nothing to import). Written by the controller. */
export const IMPORT_SOURCE_ANNOTATION = 'cdi.kubevirt.io/storage.import.source';
/** The source's URL: an http(s) URL, or a registry image as `docker://host/repo:tag`. Written by the controller. */
export const IMPORT_ENDPOINT_ANNOTATION = 'cdi.kubevirt.io/storage.import.endpoint';
/** A Secret of the claim's namespace holding the source's credentials (`spec.source.*.secretRef`). Written by the controller. */
export const IMPORT_SECRET_ANNOTATION = 'cdi.kubevirt.io/storage.import.secretName';

/** The import's phase on the node: `Running`, `Succeeded` or `Failed` (CDI: the importer pod's phase). Written by the node. */
export const IMPORT_PHASE_ANNOTATION = 'cdi.kubevirt.io/storage.pod.phase';
/** The import's progress, as DataVolume status shows it: `45.20%`. Written by the node. */
export const IMPORT_PROGRESS_ANNOTATION = 'vkvm.io/import-progress';
/** Why an import failed (or what it is doing), for the DataVolume's conditions. Written by the node. */
export const IMPORT_MESSAGE_ANNOTATION = 'vkvm.io/import-message';

export const IMPORT_SOURCES = ['http', 'registry', 'none'] as const;
export type ImportSource = (typeof IMPORT_SOURCES)[number];

export const IMPORT_PHASES = ['Running', 'Succeeded', 'Failed'] as const;
export type ImportPhase = (typeof IMPORT_PHASES)[number];

/** The scheme CDI puts before a registry source's image in the endpoint annotation. */
export const REGISTRY_ENDPOINT_PREFIX = 'docker://';
