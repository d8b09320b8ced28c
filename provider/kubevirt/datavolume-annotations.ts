// The contract between the DataVolume controller (cluster side,
// provider/controllers/datavolumes/) and the node agent's import (node side):
// annotations on the DataVolume's PersistentVolumeClaim, with CDI's own names
// where CDI has one (kubevirt.io/containerized-data-importer,
// pkg/controller/common), so tools that read CDI's claims read these too.
//
// The controller writes the source when it creates the claim; the node agent
// imports it into the volume when it publishes the claim for a VM, and reports
// on the claim as a status condition (datavolume-report.ts: a node may write
// no claim annotation); the controller mirrors the report into the
// DataVolume's status (its one writer).

/** What to import: `http`, `registry`, or `none` (blank: nothing to import). Written by the controller. */
export const IMPORT_SOURCE_ANNOTATION = 'cdi.kubevirt.io/storage.import.source';
/** The source's URL: an http(s) URL, or a registry image as `docker://host/repo:tag`. Written by the controller. */
export const IMPORT_ENDPOINT_ANNOTATION = 'cdi.kubevirt.io/storage.import.endpoint';
/** A Secret of the claim's namespace holding the source's credentials (`spec.source.*.secretRef`). Written by the controller. */
export const IMPORT_SECRET_ANNOTATION = 'cdi.kubevirt.io/storage.import.secretName';

export const IMPORT_SOURCES = ['http', 'registry', 'none'] as const;
export type ImportSource = (typeof IMPORT_SOURCES)[number];

export const IMPORT_PHASES = ['Running', 'Succeeded', 'Failed'] as const;
export type ImportPhase = (typeof IMPORT_PHASES)[number];

/** The scheme CDI puts before a registry source's image in the endpoint annotation. */
export const REGISTRY_ENDPOINT_PREFIX = 'docker://';
