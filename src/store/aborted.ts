/** What a job's history says of an attempt an administrator's cancel aborted (both engines write it). */
export const ABORTED_ATTEMPT = "aborted: the job was cancelled by an administrator during the delivery";
