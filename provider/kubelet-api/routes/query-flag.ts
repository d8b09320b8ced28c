// Boolean query parameters as Kubernetes clients send them: kube-apiserver
// writes "true" for log options and "1" for exec/attach streams. Any spelling
// Go's strconv.ParseBool reads is accepted; anything else is a 400 naming the
// parameter (fastify's own boolean coercion knows only "true" and "false").
const TRUE = ['1', 't', 'T', 'TRUE', 'true', 'True'];
const FALSE = ['0', 'f', 'F', 'FALSE', 'false', 'False'];

export const queryFlag = { type: 'string', enum: [...TRUE, ...FALSE] } as const;

export const isSet = (value: string | undefined): boolean => value !== undefined && TRUE.includes(value);
